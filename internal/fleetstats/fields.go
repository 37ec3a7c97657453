package fleetstats

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaybridge/delaybridge/contract"
)

// The field prefixes of a bucket (see the package doc).
const (
	fieldIn   = "in:"
	fieldOut  = "out:"
	fieldDead = "dead:"
	fieldLate = "late:"
	// fieldQuota counts the messages refused for a full BRIDGE_TARGET_QUOTA, by where they
	// came from: a broker's name (dead-lettered quota_exceeded) or "http" (the API's 429).
	fieldQuota = "quota:"
)

// The metrics a snapshot reads.
const (
	metricIn       = "delaybridge_messages_in_total"
	metricOut      = "delaybridge_messages_out_total"
	metricDeadOut  = "delaybridge_dead_letters_out_total"
	metricLateness = "delaybridge_delivery_lateness_seconds"
)

// Snapshot reads the replica's counters since it started from g (the bridge's metrics
// registry) as bucket fields (see the package doc). It makes no Redis call.
func Snapshot(g prometheus.Gatherer) (map[string]int64, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, fmt.Errorf("fleet stats: gather metrics: %w", err)
	}
	out := map[string]int64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			n := int64(m.GetCounter().GetValue())
			switch mf.GetName() {
			case metricIn:
				out[fieldIn+labels["result"]] += n
				if labels["reason"] == contract.ReasonQuotaExceeded {
					out[fieldQuota+labels["broker"]] += n
				}
				if labels["result"] == "invalid" && labels["broker"] != "http" {
					// The message API answered its invalid requests with a 400; the brokers'
					// went to the dead-letter subject.
					out[fieldDead+labels["reason"]] += n
				}
			case metricOut:
				out[fieldOut+labels["result"]] += n
			case metricDeadOut:
				out[fieldDead+labels["reason"]] += n
			case metricLateness:
				h := m.GetHistogram()
				below := uint64(0)
				for _, b := range h.GetBucket() {
					out[fieldLate+leName(b.GetUpperBound())] += int64(b.GetCumulativeCount() - below)
					below = b.GetCumulativeCount()
				}
				out[fieldLate+leName(math.Inf(1))] += int64(h.GetSampleCount() - below)
			}
		}
	}
	for f, n := range out {
		if n == 0 || strings.HasSuffix(f, ":") {
			delete(out, f) // nothing counted yet, or a series without its label
		}
	}
	return out, nil
}

func leName(le float64) string { return strconv.FormatFloat(le, 'g', -1, 64) }

// Counts are the counts of one bucket, or of buckets summed: messages in and out by result,
// dead letters by reason, and the deliveries by lateness bucket.
type Counts struct {
	In   map[string]int64
	Out  map[string]int64
	Dead map[string]int64
	// Late is the deliveries by the upper bound (seconds) of their lateness bucket, not
	// cumulative; +Inf for the last.
	Late map[float64]int64
	// Quota is the messages refused for a full quota, by broker ("http": the API's 429s).
	Quota map[string]int64
}

// Decode reads a bucket's fields. A field of another shape is left out (a newer bridge's
// field, read by an older one).
func Decode(fields map[string]int64) Counts {
	c := newCounts()
	for f, n := range fields {
		kind, name, ok := strings.Cut(f, ":")
		if !ok || name == "" {
			continue
		}
		switch kind + ":" {
		case fieldIn:
			c.In[name] += n
		case fieldOut:
			c.Out[name] += n
		case fieldDead:
			c.Dead[name] += n
		case fieldQuota:
			c.Quota[name] += n
		case fieldLate:
			if le, err := strconv.ParseFloat(name, 64); err == nil && !math.IsNaN(le) {
				c.Late[le] += n
			}
		}
	}
	return c
}

func newCounts() Counts {
	return Counts{In: map[string]int64{}, Out: map[string]int64{}, Dead: map[string]int64{}, Late: map[float64]int64{}, Quota: map[string]int64{}}
}

// Add adds o to c (c's maps must be made, as by Decode).
func (c Counts) Add(o Counts) {
	for k, n := range o.In {
		c.In[k] += n
	}
	for k, n := range o.Out {
		c.Out[k] += n
	}
	for k, n := range o.Dead {
		c.Dead[k] += n
	}
	for k, n := range o.Late {
		c.Late[k] += n
	}
	for k, n := range o.Quota {
		c.Quota[k] += n
	}
}

// Sum returns the sum of cs (made maps, empty for none).
func Sum(cs []Counts) Counts {
	s := newCounts()
	for _, c := range cs {
		s.Add(c)
	}
	return s
}

// Delivered is the number of deliveries whose lateness was counted.
func (c Counts) Delivered() int64 {
	n := int64(0)
	for _, v := range c.Late {
		n += v
	}
	return n
}

// Quantiles returns the p50 and p99 lateness (ms) of c's deliveries, from the summed
// lateness buckets (Quantile); nil without deliveries.
func (c Counts) Quantiles() (p50, p99 *float64) {
	cum := map[float64]uint64{}
	total := uint64(0)
	for le, n := range c.Late {
		if n > 0 {
			cum[le] = uint64(n)
			total += uint64(n)
		}
	}
	les := sortedKeys(cum)
	run := uint64(0)
	for _, le := range les {
		run += cum[le]
		cum[le] = run
	}
	return Quantile(cum, total, 0.5, nil), Quantile(cum, total, 0.99, nil)
}
