package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// monitoringFiles are the alert rules and the dashboard of deploy/: their queries may name
// only series the bridge exports, with labels those series carry.
var monitoringFiles = []string{"../deploy/prometheus/delaybridge-rules.yml", "../deploy/grafana/delaybridge-dashboard.json"}

// seriesRef is a series name in a query, with the label names of its selector if any.
var seriesRef = regexp.MustCompile(`\b((?:delaybridge|process|go)_[a-z0-9_]+)(\{[^}]*\})?`)

// selectorLabel is a label name in a selector ({a="x",b=~"y"}), JSON-escaped or not.
var selectorLabel = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)

// scrapeLabels are the labels Prometheus adds to every series it scrapes.
var scrapeLabels = map[string]bool{"job": true, "instance": true}

// checkMonitoringFiles fails t when a monitoring file names a series family (or a label of
// one) that the scrape mfs lacks. A histogram's _bucket, _sum and _count count as its family;
// le is a histogram bucket's label.
func checkMonitoringFiles(t *testing.T, mfs map[string]*dto.MetricFamily) {
	t.Helper()
	for _, f := range monitoringFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range unknownSeries(string(b), mfs) {
			t.Errorf("%s: %s", filepath.Base(f), p)
		}
	}
	// The check can fail: a name the bridge does not export, a label its series lack.
	if len(unknownSeries(`sum(delaybridge_parked_total) + delaybridge_redis_up{shard="1"}`, mfs)) != 2 {
		t.Fatal("unknownSeries missed a made-up series or label")
	}
}

// unknownSeries lists the problems of the series named in text, checked against mfs.
func unknownSeries(text string, mfs map[string]*dto.MetricFamily) []string {
	var problems []string
	for _, m := range seriesRef.FindAllStringSubmatch(text, -1) {
		name, sel := m[1], m[2]
		mf, labels := family(name, mfs)
		if mf == nil {
			problems = append(problems, name+": not exported by the bridge")
			continue
		}
		for _, l := range selectorLabel.FindAllStringSubmatch(sel, -1) {
			if !scrapeLabels[l[1]] && !labels[l[1]] {
				problems = append(problems, name+": no label "+l[1])
			}
		}
	}
	return problems
}

// family finds the family of a series name (a histogram's _bucket, _sum or _count are its
// family's) and the label names its series carry.
func family(name string, mfs map[string]*dto.MetricFamily) (*dto.MetricFamily, map[string]bool) {
	mf := mfs[name]
	labels := map[string]bool{}
	if mf == nil {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			base, ok := strings.CutSuffix(name, suffix)
			if f := mfs[base]; ok && f != nil && f.GetType() == dto.MetricType_HISTOGRAM {
				mf = f
				if suffix == "_bucket" {
					labels["le"] = true
				}
			}
		}
	}
	if mf == nil {
		return nil, nil
	}
	for _, m := range mf.GetMetric() {
		for _, lp := range m.GetLabel() {
			labels[lp.GetName()] = true
		}
	}
	return mf, labels
}
