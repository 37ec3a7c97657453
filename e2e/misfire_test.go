package e2e

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// firing is one delivery of a recurring message: its x-delay-due (unix ms).
type firing struct{ due int64 }

// TestRecurringMisfireThroughBrokers (issue 24, item 6): a recurring message whose first
// occurrence is long past (`x-deliver-at: 0`, 1970, with `x-delay-every: 1s`), published to
// the ingress subject or topic through the broker, not the API, once per misfire policy.
// Published just after a whole second X (every occurrence is on a whole second), the
// occurrences up to X were missed: `once` (the default) fires exactly one of them, as X,
// `skip` none, `all` exactly the latest 100 (X-99 .. X), all at once; then each fires about
// once a second (X+1, X+2, ...), each occurrence once. On NATS and on Kafka (issue 24 saw
// 1,616 firings in 10 s there).
func TestRecurringMisfireThroughBrokers(t *testing.T) {
	for _, broker := range []string{"nats", "kafka"} {
		t.Run(broker, func(t *testing.T) {
			publish, listen := misfireStack(t, broker)
			policies := []string{"", "skip", "all"} // "": the default, once
			chans := map[string]chan firing{}
			for _, p := range policies {
				chans[p] = listen("misfire." + policyName(p))
			}
			// Wait for a whole second, so that the occurrences missed are those up to it.
			time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 100*time.Millisecond)))
			t0 := time.Now()
			x := t0.Truncate(time.Second).UnixMilli()
			for _, p := range policies {
				hdr := []string{"x-deliver-at", "0", "x-delay-every", "1s", "x-delay-id", "misfire-" + policyName(p)}
				if p != "" {
					hdr = append(hdr, "x-delay-misfire", p)
				}
				publish("misfire."+policyName(p), hdr...)
			}
			if time.Since(t0) > 800*time.Millisecond {
				t.Fatalf("publishing took %s: the occurrence after X may have been missed too", time.Since(t0))
			}
			time.Sleep(time.Until(t0.Add(3400 * time.Millisecond))) // X+1, X+2, X+3 due by then
			for _, p := range policies {
				var catchUp, regular []int64
				for done := false; !done; {
					select {
					case f := <-chans[p]:
						if f.due <= t0.UnixMilli() {
							catchUp = append(catchUp, f.due)
						} else {
							regular = append(regular, f.due)
						}
					default:
						done = true
					}
				}
				slices.Sort(catchUp)
				slices.Sort(regular)
				t.Logf("%s: %d catch-up firings, then %d regular ones (dues %v after X)", policyName(p), len(catchUp), len(regular), relSeconds(regular, x))
				want := map[string][]int64{"": {x}, "skip": nil, "all": nil}[p]
				if p == "all" {
					for k := int64(99); k >= 0; k-- {
						want = append(want, x-k*1000)
					}
				}
				if fmt.Sprint(catchUp) != fmt.Sprint(want) {
					t.Errorf("%s: %d catch-up firings, dues %v seconds after X, want %d", policyName(p), len(catchUp), relSeconds(catchUp, x), len(want))
				}
				if len(regular) < 2 || len(regular) > 4 || regular[0] != x+1000 {
					t.Errorf("%s: regular firings due %v seconds after X, want 1, 2, 3", policyName(p), relSeconds(regular, x))
				}
				for i := 1; i < len(regular); i++ {
					if regular[i] != regular[i-1]+1000 {
						t.Errorf("%s: regular firings due %v seconds after X: not one per second, each once", policyName(p), relSeconds(regular, x))
						break
					}
				}
			}
		})
	}
}

func policyName(p string) string {
	if p == "" {
		return "once"
	}
	return p
}

// relSeconds is dues as seconds after x (the first 5 and the last, when there are more).
func relSeconds(dues []int64, x int64) string {
	var out []string
	for i, d := range dues {
		if i == 5 && len(dues) > 6 {
			out = append(out, "...")
			d = dues[len(dues)-1]
		}
		out = append(out, strconv.FormatInt((d-x)/1000, 10))
		if i == 5 {
			break
		}
	}
	return "[" + strings.Join(out, " ") + "]"
}

// misfireStack starts a bridge on broker (nats or kafka) and returns how to publish a
// message for a target to its ingress (headers as key, value pairs) and how to listen to
// a target. The bridge is shown to consume its ingress before it returns.
func misfireStack(t *testing.T, broker string) (publish func(target string, hdr ...string), listen func(target string) chan firing) {
	t.Helper()
	if broker == "nats" {
		s := newStack(t)
		startBridge(t, s.env)
		publish = func(target string, hdr ...string) {
			h := nats.Header{}
			for i := 0; i+1 < len(hdr); i += 2 {
				h.Set(hdr[i], hdr[i+1])
			}
			h.Set("x-target", s.name(target))
			if reply := request(t, s.nc, s.name("delay.in"), h, "m"); reply["error"] != nil {
				t.Fatalf("reply %v", reply)
			}
		}
		listen = func(target string) chan firing {
			in := subscribe(t, s.nc, s.name(target))
			out := make(chan firing, 10000)
			go func() {
				for a := range in {
					due, _ := strconv.ParseInt(a.msg.Header.Get("x-delay-due"), 10, 64)
					out <- firing{due}
				}
			}()
			return out
		}
	} else {
		s, cl := kafkaStack(t, false)
		brokers := strings.Split(s.env["BRIDGE_KAFKA_BROKERS"], ",")
		startBridge(t, s.env)
		publish = func(target string, hdr ...string) {
			produce(t, cl, s.name("delay.in"), nil, "m", append(hdr, "x-target", s.name(target))...)
		}
		listen = func(target string) chan firing {
			s.createTopic(t, brokers, s.name(target), 3)
			in := consume(t, brokers, s.name(target))
			out := make(chan firing, 10000)
			go func() {
				for r := range in {
					v, _ := header(r.rec, "x-delay-due")
					due, _ := strconv.ParseInt(v, 10, 64)
					out <- firing{due}
				}
			}()
			return out
		}
	}
	warm := listen("misfire.warm")
	publish("misfire.warm", "x-delay", "0")
	select {
	case <-warm:
	case <-time.After(30 * time.Second):
		t.Fatal("the bridge delivered nothing within 30s")
	}
	return publish, listen
}
