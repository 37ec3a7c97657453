package intake

import (
	"errors"
	"strings"
	"testing"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/internal/subject"
)

var own = []string{"delay.in", "delay.cancel", "delay.dlq"}

// testPolicy has both brokers, allows everything, and the default own names.
func testPolicy() TargetPolicy {
	return TargetPolicy{
		Brokers: map[string]bool{BrokerNATS: true, BrokerKafka: true},
		Allow:   []string{"*"},
		Own:     map[string][]string{BrokerNATS: own, BrokerKafka: own},
	}
}

func TestTargetString(t *testing.T) {
	if got := (Target{Broker: "nats", Name: "orders.timeout"}).String(); got != "nats:orders.timeout" {
		t.Fatalf("String() = %q", got)
	}
}

func TestParseTargetAccepts(t *testing.T) {
	natsOnly := testPolicy()
	natsOnly.Brokers = map[string]bool{BrokerNATS: true}
	kafkaOnly := testPolicy()
	kafkaOnly.Brokers = map[string]bool{BrokerKafka: true}
	tests := []struct {
		name   string
		p      TargetPolicy
		value  string
		source string
		want   string
	}{
		{"unprefixed from nats", testPolicy(), "orders.timeout", BrokerNATS, "nats:orders.timeout"},
		{"unprefixed from kafka", testPolicy(), "orders.timeout", BrokerKafka, "kafka:orders.timeout"},
		{"nats prefix from kafka", testPolicy(), "nats:orders.timeout", BrokerKafka, "nats:orders.timeout"},
		{"kafka prefix from nats", testPolicy(), "kafka:orders.timeout", BrokerNATS, "kafka:orders.timeout"},
		{"prefix case-insensitive", testPolicy(), "NATS:orders.timeout", BrokerKafka, "nats:orders.timeout"},
		{"Kafka prefix mixed case", testPolicy(), "Kafka:orders", BrokerNATS, "kafka:orders"},
		{"http source prefers nats", testPolicy(), "orders", "", "nats:orders"},
		{"http source, kafka only", kafkaOnly, "orders", "", "kafka:orders"},
		{"http source, nats only", natsOnly, "orders", "", "nats:orders"},
		{"colon in nats subject", testPolicy(), "nats:a:b", BrokerKafka, "nats:a:b"},
		{"single token", testPolicy(), "orders", BrokerNATS, "nats:orders"},
		{"own prefix but not own", testPolicy(), "delay.input", BrokerNATS, "nats:delay.input"},
		{"own parent", testPolicy(), "delay", BrokerNATS, "nats:delay"},
		{"own child", testPolicy(), "delay.in.x", BrokerNATS, "nats:delay.in.x"},
		{"dollar not first", testPolicy(), "orders.$x", BrokerNATS, "nats:orders.$x"},
		{"inbox not first", testPolicy(), "orders._INBOX", BrokerNATS, "nats:orders._INBOX"},
		{"lower-case inbox", testPolicy(), "_inbox.x", BrokerNATS, "nats:_inbox.x"},
		{"unicode subject", testPolicy(), "bestellungen.größe", BrokerNATS, "nats:bestellungen.größe"},
		{"max subject", testPolicy(), strings.Repeat("a", MaxSubjectLen), BrokerNATS, "nats:" + strings.Repeat("a", MaxSubjectLen)},
		{"kafka all chars", testPolicy(), "kafka:Orders_timeout-1.v2", BrokerNATS, "kafka:Orders_timeout-1.v2"},
		{"kafka single underscore", testPolicy(), "kafka:_private", BrokerNATS, "kafka:_private"},
		{"kafka double dot inside", testPolicy(), "kafka:a..b", BrokerNATS, "kafka:a..b"},
		{"kafka three dots", testPolicy(), "kafka:...", BrokerNATS, "kafka:..."},
		{"kafka max length", testPolicy(), "kafka:" + strings.Repeat("t", MaxTopicLen), BrokerNATS, "kafka:" + strings.Repeat("t", MaxTopicLen)},
		{"kafka own name on nats", testPolicy(), "delay.in.retry", BrokerKafka, "kafka:delay.in.retry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.p.ParseTarget(tt.value, tt.source)
			if err != nil {
				t.Fatalf("ParseTarget(%q, %q): %v", tt.value, tt.source, err)
			}
			if got.String() != tt.want {
				t.Fatalf("ParseTarget(%q, %q) = %q, want %q", tt.value, tt.source, got, tt.want)
			}
		})
	}
}

func TestParseTargetRejects(t *testing.T) {
	natsOnly := testPolicy()
	natsOnly.Brokers = map[string]bool{BrokerNATS: true}
	wildOwn := testPolicy()
	wildOwn.Own = map[string][]string{BrokerNATS: {"delay.>", "bridge.*.cancel"}, BrokerKafka: {"delay.in"}}
	tests := []struct {
		name   string
		p      TargetPolicy
		value  string
		source string
		reason string
	}{
		// docs/faults.md G4.
		{"empty", testPolicy(), "", BrokerNATS, contract.ReasonMissingTarget},
		// Prefixes and brokers.
		{"unknown prefix", testPolicy(), "foo:bar", BrokerNATS, contract.ReasonInvalidTarget},
		{"unprefixed colon", testPolicy(), "a:b", BrokerNATS, contract.ReasonInvalidTarget},
		{"empty prefix", testPolicy(), ":orders", BrokerNATS, contract.ReasonInvalidTarget},
		{"empty name after prefix", testPolicy(), "nats:", BrokerKafka, contract.ReasonInvalidTarget},
		{"empty kafka name", testPolicy(), "kafka:", BrokerKafka, contract.ReasonInvalidTarget},
		{"unknown source broker", testPolicy(), "orders", "http", contract.ReasonInvalidTarget},
		{"kafka not configured", natsOnly, "kafka:orders", BrokerNATS, contract.ReasonBrokerNotConfigured},
		{"source broker not configured", natsOnly, "orders", BrokerKafka, contract.ReasonBrokerNotConfigured},
		{"nothing configured", TargetPolicy{Allow: []string{"*"}}, "orders", "", contract.ReasonBrokerNotConfigured},
		// docs/faults.md G5: loops, wildcard overlap included.
		{"ingress subject", testPolicy(), "delay.in", BrokerNATS, contract.ReasonTargetLoop},
		{"cancel subject", testPolicy(), "nats:delay.cancel", BrokerKafka, contract.ReasonTargetLoop},
		{"dlq subject", testPolicy(), "delay.dlq", BrokerNATS, contract.ReasonTargetLoop},
		{"kafka ingress topic", testPolicy(), "kafka:delay.in", BrokerNATS, contract.ReasonTargetLoop},
		{"kafka dlq topic", testPolicy(), "delay.dlq", BrokerKafka, contract.ReasonTargetLoop},
		{"own wildcard >", wildOwn, "delay.in", BrokerNATS, contract.ReasonTargetLoop},
		{"own wildcard > deep", wildOwn, "delay.x.y.z", BrokerNATS, contract.ReasonTargetLoop},
		{"own wildcard *", wildOwn, "bridge.eu.cancel", BrokerNATS, contract.ReasonTargetLoop},
		// docs/faults.md G6: malformed NATS subjects.
		{"wildcard *", testPolicy(), "a.*", BrokerNATS, contract.ReasonInvalidTarget},
		{"wildcard >", testPolicy(), "a.>", BrokerNATS, contract.ReasonInvalidTarget},
		{"bare *", testPolicy(), "*", BrokerNATS, contract.ReasonInvalidTarget},
		{"bare >", testPolicy(), ">", BrokerNATS, contract.ReasonInvalidTarget},
		{"star inside token", testPolicy(), "a*b", BrokerNATS, contract.ReasonInvalidTarget},
		{"gt inside token", testPolicy(), "a.b>", BrokerNATS, contract.ReasonInvalidTarget},
		{"empty token", testPolicy(), "a..b", BrokerNATS, contract.ReasonInvalidTarget},
		{"leading dot", testPolicy(), ".a", BrokerNATS, contract.ReasonInvalidTarget},
		{"trailing dot", testPolicy(), "a.", BrokerNATS, contract.ReasonInvalidTarget},
		{"dot", testPolicy(), ".", BrokerNATS, contract.ReasonInvalidTarget},
		{"space", testPolicy(), "a b", BrokerNATS, contract.ReasonInvalidTarget},
		{"leading space", testPolicy(), " a", BrokerNATS, contract.ReasonInvalidTarget},
		{"tab", testPolicy(), "a\tb", BrokerNATS, contract.ReasonInvalidTarget},
		{"crlf", testPolicy(), "a\r\nb", BrokerNATS, contract.ReasonInvalidTarget},
		{"nul", testPolicy(), "a\x00b", BrokerNATS, contract.ReasonInvalidTarget},
		{"del", testPolicy(), "a\x7fb", BrokerNATS, contract.ReasonInvalidTarget},
		{"nbsp", testPolicy(), "a\u00a0b", BrokerNATS, contract.ReasonInvalidTarget},
		{"next line", testPolicy(), "a\u0085b", BrokerNATS, contract.ReasonInvalidTarget},
		{"invalid utf8", testPolicy(), "a\xffb", BrokerNATS, contract.ReasonInvalidTarget},
		{"too long", testPolicy(), strings.Repeat("a", MaxSubjectLen+1), BrokerNATS, contract.ReasonInvalidTarget},
		// docs/faults.md G7: reserved namespaces.
		{"$JS.API delete", testPolicy(), "$JS.API.STREAM.DELETE.ORDERS", BrokerNATS, contract.ReasonInvalidTarget},
		{"$JS.ACK", testPolicy(), "$JS.ACK.ORDERS.c.1.2.3.4.5", BrokerNATS, contract.ReasonInvalidTarget},
		{"$KV", testPolicy(), "$KV.bucket.key", BrokerNATS, contract.ReasonInvalidTarget},
		{"$SYS", testPolicy(), "$SYS.REQ.SERVER.PING", BrokerNATS, contract.ReasonInvalidTarget},
		{"$O", testPolicy(), "nats:$O.store.x", BrokerKafka, contract.ReasonInvalidTarget},
		{"_INBOX.", testPolicy(), "_INBOX.abc.def", BrokerNATS, contract.ReasonInvalidTarget},
		{"_INBOX", testPolicy(), "_INBOX", BrokerNATS, contract.ReasonInvalidTarget},
		{"_INBOX prefix", testPolicy(), "_INBOXabc", BrokerNATS, contract.ReasonInvalidTarget},
		{"__consumer_offsets", testPolicy(), "kafka:__consumer_offsets", BrokerNATS, contract.ReasonInvalidTarget},
		{"__transaction_state", testPolicy(), "__transaction_state", BrokerKafka, contract.ReasonInvalidTarget},
		// Kafka names.
		{"kafka .", testPolicy(), "kafka:.", BrokerNATS, contract.ReasonInvalidTarget},
		{"kafka ..", testPolicy(), "kafka:..", BrokerNATS, contract.ReasonInvalidTarget},
		{"kafka slash", testPolicy(), "kafka:a/b", BrokerNATS, contract.ReasonInvalidTarget},
		{"kafka space", testPolicy(), "kafka:a b", BrokerNATS, contract.ReasonInvalidTarget},
		{"kafka colon", testPolicy(), "kafka:a:b", BrokerNATS, contract.ReasonInvalidTarget},
		{"kafka star", testPolicy(), "kafka:a*", BrokerNATS, contract.ReasonInvalidTarget},
		{"kafka unicode", testPolicy(), "kafka:größe", BrokerNATS, contract.ReasonInvalidTarget},
		{"kafka too long", testPolicy(), "kafka:" + strings.Repeat("t", MaxTopicLen+1), BrokerNATS, contract.ReasonInvalidTarget},
		{"kafka dollar", testPolicy(), "$JS.API.X", BrokerKafka, contract.ReasonInvalidTarget},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.p.ParseTarget(tt.value, tt.source)
			if err == nil {
				t.Fatalf("ParseTarget(%q, %q) = %q, want an error", tt.value, tt.source, got)
			}
			if r := Reason(err); r != tt.reason {
				t.Fatalf("ParseTarget(%q, %q): %v: reason %q, want %q", tt.value, tt.source, err, r, tt.reason)
			}
			if !errors.Is(err, ErrInvalidTarget) {
				t.Fatalf("error %v does not wrap ErrInvalidTarget", err)
			}
			if got != (Target{}) {
				t.Fatalf("non-zero target %+v with an error", got)
			}
		})
	}
}

func TestParseTargetAllowList(t *testing.T) {
	p := testPolicy()
	p.Allow = []string{"orders.*", "kafka:billing.*", "nats:audit.?", "ex[ab]ct", "lit\\*"}
	tests := []struct {
		value, source string
		ok            bool
	}{
		{"orders.timeout", BrokerNATS, true},
		{"orders.a.b.c", BrokerNATS, true}, // "*" crosses dots
		{"kafka:orders.timeout", BrokerNATS, true},
		{"orders", BrokerNATS, false},
		{"orders.", BrokerNATS, false}, // invalid anyway
		{"billing.x", BrokerNATS, false},
		{"billing.x", BrokerKafka, true},
		{"kafka:billing.x", BrokerNATS, true},
		{"audit.a", BrokerNATS, true},
		{"audit.ab", BrokerNATS, false},
		{"kafka:audit.a", BrokerNATS, false},
		{"exact", BrokerNATS, true},
		{"exbct", BrokerNATS, true},
		{"excct", BrokerNATS, false},
		{"lit", BrokerNATS, false},
		{"litx", BrokerNATS, false},
		{"other", BrokerKafka, false},
	}
	for _, tt := range tests {
		_, err := p.ParseTarget(tt.value, tt.source)
		switch {
		case tt.ok && err != nil:
			t.Errorf("ParseTarget(%q, %q): %v", tt.value, tt.source, err)
		case !tt.ok && err == nil:
			t.Errorf("ParseTarget(%q, %q) accepted", tt.value, tt.source)
		case !tt.ok && tt.value != "orders." && Reason(err) != contract.ReasonTargetNotAllowed:
			t.Errorf("ParseTarget(%q, %q): %v: reason %q", tt.value, tt.source, err, Reason(err))
		}
	}

	// An empty allow list allows nothing; a malformed pattern matches nothing.
	for _, allow := range [][]string{nil, {}, {"["}, {"orders.[a"}} {
		p.Allow = allow
		if _, err := p.ParseTarget("orders.timeout", BrokerNATS); Reason(err) != contract.ReasonTargetNotAllowed {
			t.Errorf("Allow %q: got %v", allow, err)
		}
	}
	// Loops are rejected even when allowed.
	p.Allow = []string{"*"}
	if _, err := p.ParseTarget("delay.in", BrokerNATS); Reason(err) != contract.ReasonTargetLoop {
		t.Errorf("loop allowed: %v", err)
	}
	// Reserved names are rejected even when an allow pattern names them.
	p.Allow = []string{"$JS.*", "_INBOX.*", "kafka:__*"}
	for _, v := range []string{"$JS.API.STREAM.DELETE.X", "_INBOX.x", "kafka:__consumer_offsets"} {
		if _, err := p.ParseTarget(v, BrokerNATS); Reason(err) != contract.ReasonInvalidTarget {
			t.Errorf("%q: got %v", v, err)
		}
	}
}

func TestTargetErrorText(t *testing.T) {
	_, err := testPolicy().ParseTarget("delay.in", BrokerNATS)
	if want := `invalid target "delay.in": overlaps the bridge's own subject "delay.in"`; err == nil || err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
	_, err = testPolicy().ParseTarget("", BrokerNATS)
	if want := `missing target: x-target is empty`; err == nil || err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
}

func FuzzParseTarget(f *testing.F) {
	for _, s := range [][2]string{
		{"orders.timeout", "nats"}, {"nats:orders.timeout", "kafka"}, {"kafka:orders.timeout", ""},
		{"delay.in", "nats"}, {"delay.x.y", "nats"}, {"a.*", "nats"}, {"a..b", "nats"}, {"$JS.API.X", "nats"},
		{"_INBOX.x", "nats"}, {"kafka:__consumer_offsets", "nats"}, {"a b", "kafka"}, {"foo:bar", "nats"},
		{"", "nats"}, {"bridge.eu.cancel", "nats"},
	} {
		f.Add(s[0], s[1])
	}
	p := TargetPolicy{
		Brokers: map[string]bool{BrokerNATS: true, BrokerKafka: true},
		Allow:   []string{"*"},
		Own: map[string][]string{
			BrokerNATS:  {"delay.>", "bridge.*.cancel", "dlq"},
			BrokerKafka: {"delay.in", "delay.dlq"},
		},
	}
	f.Fuzz(func(t *testing.T, value, source string) {
		got, err := p.ParseTarget(value, source)
		if err != nil {
			if !errors.Is(err, ErrInvalidTarget) || Reason(err) == contract.ReasonUnknown {
				t.Fatalf("ParseTarget(%q, %q): error %v, reason %q", value, source, err, Reason(err))
			}
			return
		}
		if got.Broker != BrokerNATS && got.Broker != BrokerKafka {
			t.Fatalf("ParseTarget(%q, %q): broker %q", value, source, got.Broker)
		}
		n := got.Name
		if n == "" || strings.ContainsAny(n, "*> \t\r\n\x00") || got.Broker == BrokerNATS && (n[0] == '$' || strings.HasPrefix(n, "_INBOX")) {
			t.Fatalf("ParseTarget(%q, %q) accepted %q", value, source, got)
		}
		for _, r := range n {
			if r < 0x20 || r == 0x7f || r == 0x85 || r == 0xa0 || r == 0x2028 {
				t.Fatalf("ParseTarget(%q, %q) accepted %q", value, source, got)
			}
		}
		for _, o := range p.Own[got.Broker] {
			if subject.Overlap(n, o) {
				t.Fatalf("ParseTarget(%q, %q) = %q overlaps own %q", value, source, got, o)
			}
		}
		if got.Broker == BrokerKafka && (len(n) > MaxTopicLen || strings.HasPrefix(n, "__")) {
			t.Fatalf("ParseTarget(%q, %q) accepted topic %q", value, source, n)
		}
		// The normalized form re-parses to itself from any source.
		for _, src := range []string{"", BrokerNATS, BrokerKafka} {
			again, err := p.ParseTarget(got.String(), src)
			if err != nil || again != got {
				t.Fatalf("ParseTarget(%q) = %q, re-parse from %q = %q, %v", value, got, src, again, err)
			}
		}
	})
}
