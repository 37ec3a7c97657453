package contract

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestLookalike(t *testing.T) {
	for name, want := range map[string]string{
		"x-dealy": HeaderDelay, "X-DEALY": HeaderDelay, "x-delya": HeaderDelay, "delay": HeaderDelay, "x_delay": HeaderDelay,
		"x-delays": HeaderDelay, "xdelay": HeaderDelay, "x-taget": HeaderTarget, "x-targets": HeaderTarget,
		"x-deliver_at": HeaderDeliverAt, "x-deliverat": HeaderDeliverAt, "x-delay-di": HeaderID, "x-delay-ids": HeaderID,
		"x-delay-expire": HeaderExpires, "x-delay-evry": HeaderEvery, "X-Kafka-Keys": HeaderKafkaKey,
		// Not look-alikes: the names themselves (any case), the bridge's own output
		// headers, and names more than two edits away.
		"x-delay": "", "X-Delay": "", "x-target": "", "x-delay-id": "", "x-delay-due": "", "x-delay-source": "",
		"x-delay-error": "", "x-delay-hops": "", "content-type": "", "traceparent": "", "x-date": "", "x-trace": "",
		"x-retry": "", "tenant": "", "x-request-id": "", "Nats-Msg-Id": "", "": "", "x-": "",
		"x-delay-" + strings.Repeat("e", 40): "",
	} {
		if got := Lookalike(name); got != want {
			t.Errorf("Lookalike(%q) = %q, want %q", name, got, want)
		}
	}
}

// No contract header name is a look-alike of another, and every name fits the rows.
func TestContractNamesAreNotLookalikes(t *testing.T) {
	for _, n := range append(slices.Clone(Read), written...) {
		if got := Lookalike(n); got != "" {
			t.Errorf("contract header %s taken for a look-alike of %s", n, got)
		}
		if len(n) > maxNameLen || n != strings.ToLower(n) {
			t.Errorf("contract header %q: longer than %d or not lower case", n, maxNameLen)
		}
	}
}

// Lookalike allocates nothing, near or not.
func TestLookalikeAllocatesNothing(t *testing.T) {
	for _, name := range []string{"content-type", "x-dealy", "traceparent", "x-delay"} {
		if n := testing.AllocsPerRun(100, func() { Lookalike(name) }); n != 0 {
			t.Errorf("Lookalike(%q): %v allocations", name, n)
		}
	}
}

// TestReadListsEveryIncomingHeader: every constant of the block "Headers read from an
// incoming message" in contract.go is in Read (a header added there without Read would
// have no look-alike warning).
func TestReadListsEveryIncomingHeader(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "contract.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST || g.Doc == nil || !strings.HasPrefix(g.Doc.Text(), "Headers read from an incoming message") {
			continue
		}
		found = true
		for _, s := range g.Specs {
			for _, v := range s.(*ast.ValueSpec).Values {
				lit, ok := v.(*ast.BasicLit)
				if !ok {
					continue
				}
				name, _ := strconv.Unquote(lit.Value)
				if !slices.Contains(Read, name) {
					t.Errorf("%s is read from incoming messages but not in Read", name)
				}
			}
		}
	}
	if !found {
		t.Fatal(`no const block "Headers read from an incoming message" in contract.go`)
	}
}

// BenchmarkLookalike: the names of a typical message, none near a contract header.
func BenchmarkLookalike(b *testing.B) {
	names := []string{"x-delay", "x-target", "x-delay-id", "content-type", "traceparent", "tenant", "x-request-id", "Nats-Msg-Id"}
	b.ReportAllocs()
	for b.Loop() {
		for _, n := range names {
			if Lookalike(n) != "" {
				b.Fatal(n)
			}
		}
	}
}

// distance agrees with the plain dynamic programme on every pair of a small alphabet's
// words up to 5 letters against the contract names' shapes.
func TestDistanceBanded(t *testing.T) {
	plain := func(a, b string) int {
		prev := make([]int, len(b)+1)
		for j := range prev {
			prev[j] = j
		}
		for i := 1; i <= len(a); i++ {
			cur := make([]int, len(b)+1)
			cur[0] = i
			for j := 1; j <= len(b); j++ {
				cost := 1
				if lower(a[i-1]) == b[j-1] {
					cost = 0
				}
				cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			}
			prev = cur
		}
		return prev[len(b)]
	}
	words := []string{"", "a", "ab", "ba", "abc", "acb", "bca", "aabc", "abcc", "cabca", "XDE", "x-de"}
	for _, a := range words {
		for _, b := range append(words[:10:10], "x-de", "abcab") {
			b = strings.ToLower(b)
			for limit := 0; limit <= 2; limit++ {
				want := min(plain(a, b), limit+1)
				if got := distance(a, b, limit); got != want {
					t.Errorf("distance(%q, %q, %d) = %d, want %d", a, b, limit, got, want)
				}
			}
		}
	}
}
