package delaystore

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/internal/headers"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// TestScriptsAreConstants is row H2: every script is a file of lua/ embedded at build
// time, passed to redis.NewScript as is (and, for its unflagged form, through unflagged,
// which only comments its first line out); no script text is ever built at run time (no
// fmt.Sprintf, concatenation or other expression), so no data can become code. All data
// reach the scripts through KEYS and ARGV. The Lua sources use no dynamic code loading.
func TestScriptsAreConstants(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	embedded := map[string]bool{} // package-level string vars with a //go:embed lua/*.lua
	var calls []*ast.CallExpr
	assigned := map[string]int{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		// A //go:embed lua/... directive and the variable declared on the next line.
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				if strings.HasPrefix(c.Text, "//go:embed lua/") {
					pos := fset.Position(c.End())
					for _, d := range f.Decls {
						gd, ok := d.(*ast.GenDecl)
						if !ok || gd.Tok != token.VAR {
							continue
						}
						for _, spec := range gd.Specs {
							vs := spec.(*ast.ValueSpec)
							if fset.Position(vs.Pos()).Line == pos.Line+1 {
								for _, n := range vs.Names {
									embedded[n.Name] = true
								}
							}
						}
					}
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.CallExpr:
				if sel, ok := x.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "NewScript" {
					calls = append(calls, x)
				}
				if sel, ok := x.Fun.(*ast.SelectorExpr); ok && (sel.Sel.Name == "Eval" || sel.Sel.Name == "EvalRO" || sel.Sel.Name == "Do") {
					if id, ok := sel.X.(*ast.Ident); ok && (id.Name == "rdb" || id.Name == "pipe") {
						t.Errorf("%s: raw %s on a client: run scripts only through redis.Script", fset.Position(x.Pos()), sel.Sel.Name)
					}
				}
			case *ast.AssignStmt:
				for _, l := range x.Lhs {
					if id, ok := l.(*ast.Ident); ok {
						assigned[id.Name]++
					}
				}
			}
			return true
		})
	}
	if len(embedded) == 0 {
		t.Fatal("no //go:embed lua/*.lua variables found")
	}
	direct := 0
	for _, c := range calls {
		if len(c.Args) == 1 {
			// The unflagged form (scripts.go): the same constant with its shebang line
			// commented out, TestUnflagged; and the form with the shared library in place of
			// its include line (withLibs: constants only, TestWithLibs).
			plain := true
			for {
				u, ok := c.Args[0].(*ast.CallExpr)
				if !ok || len(u.Args) != 1 {
					break
				}
				fn, ok := u.Fun.(*ast.Ident)
				if !ok || (fn.Name != "unflagged" && fn.Name != "withLibs") {
					break
				}
				plain = plain && fn.Name != "unflagged"
				c = &ast.CallExpr{Fun: c.Fun, Args: u.Args}
			}
			if plain {
				direct++
			}
		}
		id, ok := c.Args[0].(*ast.Ident)
		if len(c.Args) != 1 || !ok || !embedded[id.Name] {
			t.Errorf("%s: redis.NewScript must take an embedded lua/*.lua variable as is", fset.Position(c.Pos()))
			continue
		}
		if assigned[id.Name] > 0 {
			t.Errorf("%s: script variable %s is assigned at run time", fset.Position(c.Pos()), id.Name)
		}
	}

	// Libraries (embedded as <name>Lib) are not scripts: they enter one only through
	// withLibs.
	libs := 0
	for name := range embedded {
		if strings.HasSuffix(name, "Lib") {
			libs++
		}
	}
	if direct != len(embedded)-libs {
		t.Errorf("%d redis.NewScript calls on embedded scripts as is, for %d embedded scripts", direct, len(embedded)-libs)
	}

	luas, _ := filepath.Glob("lua/*.lua")
	forbidden := regexp.MustCompile(`\b(loadstring|load|dofile|loadfile|setfenv|getfenv|rawset)\s*\(`)
	for _, name := range luas {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if m := forbidden.Find(src); m != nil {
			t.Errorf("%s: dynamic code %q", name, m)
		}
	}
}

// FuzzARGVRoundTrip is row H2's fuzz: ids, source ids, targets, header names and values and
// payloads of any bytes (Lua patterns, quotes, "}{", NULs, newlines) go through ARGV and
// come back unchanged, and never add a key beyond the fixed set; the source id read by the
// scripts becomes a tombstone member (cancel), never a key.
func FuzzARGVRoundTrip(f *testing.F) {
	for _, s := range []string{"", "a}{b", "*", "?", "[x]", "%s%d", "\x00", "'; return redis.call('FLUSHALL') --",
		"]]..redis.call('FLUSHALL')..[[", "{delay:0}:z", "\r\n*1\r\n$8\r\nFLUSHALL\r\n", "\xff\xfe", strings.Repeat("}", 300)} {
		f.Add(s, []byte(s))
	}
	fx := newFixture(f, testredis.URL(f))
	keyRE := regexp.MustCompile(`^\{` + regexp.QuoteMeta(fx.prefix) + `:[0-9]+\}:(z|m|seq|epoch|t|r|n|c|cx)$|^` + regexp.QuoteMeta(fx.prefix) + `:(shards|cursor)$|^\{` +
		regexp.QuoteMeta(fx.prefix) + `:fleet\}:(members|version|pending|tokens)$`)
	var iter atomic.Int64
	f.Fuzz(func(t *testing.T, s string, payload []byte) {
		id := "id-" + s
		src := s + ":" + strconv.FormatInt(iter.Add(1), 10) // unique: the tombstone outlives the run
		env := Envelope{SourceID: src, Target: "out." + s, Source: "nats:" + s, Headers: headers.List{{Key: "h" + s, Value: s}}, Key: []byte(s), Payload: payload}
		if _, err := fx.s.Park(t.Context(), []ParkRequest{{ID: id, Replace: true, Delay: time.Hour, Envelope: env}}); err != nil {
			t.Fatalf("park %q: %v", id, err)
		}
		m, err := fx.s.Get(t.Context(), id)
		if err != nil {
			t.Fatalf("get %q: %v", id, err)
		}
		if m.ID != id || m.Envelope.Target != env.Target || m.Envelope.Source != env.Source || m.Envelope.SourceID != src ||
			!bytes.Equal(m.Envelope.Payload, payload) || !bytes.Equal(m.Envelope.Key, env.Key) ||
			len(m.Envelope.Headers) != 1 || m.Envelope.Headers[0] != env.Headers[0] {
			t.Fatalf("round trip of %q changed the message: %+v", s, m)
		}
		if ok, err := fx.s.Cancel(t.Context(), id); err != nil || !ok {
			t.Fatalf("cancel %q: %v %v", id, ok, err)
		}
		if sc, err := fx.rdb.ZScore(t.Context(), fmt.Sprintf("{%s:%d}:t", fx.prefix, fx.s.ShardOf(id)), src).Result(); err != nil || sc <= 0 {
			t.Fatalf("no tombstone of source id %q after cancel: %v", src, err)
		}
		if p, err := fx.s.Park(t.Context(), []ParkRequest{{ID: id, Replace: true, Delay: time.Hour, Envelope: env}}); err != nil || !p[0].Delivered {
			t.Fatalf("redelivery of cancelled %q: %+v %v", src, p, err)
		}
		// A replica id of the same bytes goes through member.lua unchanged.
		if rid := "r-" + s; len(rid) <= MaxMemberID {
			m, err := confirmedBeat(t.Context(), fx.s, rid, time.Minute, -1, "")
			if err != nil || !slices.Contains(m.IDs, rid) {
				t.Fatalf("heartbeat %q: %+v %v", rid, m, err)
			}
			if err := fx.s.Leave(t.Context(), rid); err != nil {
				t.Fatalf("leave %q: %v", rid, err)
			}
		}
		iter := fx.rdb.Scan(t.Context(), 0, "*"+fx.prefix+"*", 1000).Iterator()
		for iter.Next(t.Context()) {
			if !keyRE.MatchString(iter.Val()) {
				t.Fatalf("input %q created key %q", s, iter.Val())
			}
		}
	})
}
