package redrive

import (
	"strings"
	"testing"

	"github.com/delaybridge/delaybridge/internal/headers"
)

func TestJudge(t *testing.T) {
	list := func(kv ...string) headers.List {
		var l headers.List
		for i := 0; i+1 < len(kv); i += 2 {
			l.Add(kv[i], kv[i+1])
		}
		return l
	}
	for _, tc := range []struct {
		name      string
		h         headers.List
		opts      Options
		schedules bool
		reason    string
		redrive   bool
	}{
		{"reason code", list("X-Delay-Error", "publish_failed: 10 attempts"), Options{}, true, "publish_failed", true},
		{"no error header", list("x-target", "a"), Options{}, true, "unknown", true},
		{"not selected", list("x-delay-error", "forbidden: no"), Options{Reasons: []string{"too_large"}}, true, "forbidden", false},
		{"selected", list("x-delay-error", "too_large: 9"), Options{Reasons: []string{"forbidden", "too_large"}}, true, "too_large", true},
		{"no payload", list("x-delay-error", "too_large: 9", "x-delay-original-size", "9"), Options{}, true, "no_payload", false},
		{"schedule, core ingress", list("x-delay-error", "x: y", "x-delay-original-Nats-Schedule", "@at 2030-01-01T00:00:00Z"), Options{}, true, "x", true},
		{"schedule, JetStream ingress", list("x-delay-error", "x: y", "x-delay-original-nats-schedule-target", "a"), Options{}, false, "nats_schedule", false},
	} {
		reason, redrive := judge(tc.h, "1", tc.opts.prepare(), tc.schedules)
		if reason != tc.reason || redrive != tc.redrive {
			t.Errorf("%s: judge = %s, %v; want %s, %v", tc.name, reason, redrive, tc.reason, tc.redrive)
		}
	}
}

func TestRepublished(t *testing.T) {
	var h headers.List
	for _, kv := range [][2]string{{"x-target", "a"}, {"X-Delay-Error", "e: f"}, {"x-delay-due", "1"}, {"x-delay-source", "nats:x"},
		{"x-delay-original-Nats-Schedule", "@at 2030-01-01T00:00:00Z"}, {"x-delay-original-Nats-Msg-Id", "m"}, {"keep", "1"}, {"keep", "2"},
		{"X-Delay-Redrive", "DLQ:3"}} {
		h.Add(kv[0], kv[1])
	}
	var got []string
	for _, f := range republished(h, "DLQ:7") {
		got = append(got, f.Key+"="+f.Value)
	}
	want := "x-target=a,Nats-Schedule=@at 2030-01-01T00:00:00Z,x-delay-original-Nats-Msg-Id=m,keep=1,keep=2,x-delay-redrive=DLQ:7"
	if strings.Join(got, ",") != want {
		t.Fatalf("republished = %s\nwant          %s", strings.Join(got, ","), want)
	}
}

func TestCountsPrint(t *testing.T) {
	c := Counts{}
	c.of("b").Redriven, c.of("b").Selected = 2, 2
	c.of("a").Left = 1
	var sb strings.Builder
	if err := c.Print(&sb, false); err != nil {
		t.Fatal(err)
	}
	if want := "REASON  REDRIVEN  REFUSED AGAIN  LEFT  OTHER RUN\na       0         0              1     0\nb       2         0              0     0\n"; sb.String() != want {
		t.Fatalf("Print =\n%s\nwant\n%s", sb.String(), want)
	}
}
