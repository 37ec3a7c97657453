package delaystore

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
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
// time, passed to redis.NewScript as is (with the libraries of lua/ in place of its include
// lines, and, for its unflagged form, with its first line commented out); no script text
// is ever built at run time from anything else (no fmt.Sprintf, concatenation or other
// expression of data), so no data can become code: redis.NewScript is called only by
// newScript (scripts.go), and every script of a Store hashes to the files' text put
// together here from lua/ on disk. All data reach the scripts through KEYS and ARGV. The
// Lua sources use no dynamic code loading.
func TestScriptsAreConstants(t *testing.T) {
	sha1hex := func(s string) string { h := sha1.Sum([]byte(s)); return hex.EncodeToString(h[:]) }
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	embedded := map[string]bool{} // package-level vars with a //go:embed lua/... directive
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
		fn := "" // the function declaration being walked
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.FuncDecl:
				fn = x.Name.Name
			case *ast.CallExpr:
				if sel, ok := x.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "NewScript" {
					calls = append(calls, x)
					if name != "scripts.go" || fn != "newScript" {
						t.Errorf("%s: redis.NewScript outside newScript (scripts.go): scripts are built only from scriptDefs", fset.Position(x.Pos()))
					}
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
	for name := range embedded {
		if assigned[name] > 0 {
			t.Errorf("embedded variable %s is assigned at run time", name)
		}
	}
	if len(calls) == 0 {
		t.Fatal("no redis.NewScript call found")
	}

	// Every script of a Store, both forms, is the text of its file with the libraries its
	// include lines name in their place, read here from lua/; the unflagged form differs
	// only by "--" before a shebang line.
	read := func(file string) string {
		b, err := os.ReadFile(filepath.Join("lua", file))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	includeRE := regexp.MustCompile(`(?m)^--!include (.*)\n`)
	s, err := newScripts()
	if err != nil {
		t.Fatal(err)
	}
	libs := map[string]bool{}
	for _, sc := range s {
		want := includeRE.ReplaceAllStringFunc(read(sc.name+".lua"), func(line string) string {
			lib := includeRE.FindStringSubmatch(line)[1]
			libs[lib] = true
			return read(lib)
		})
		plain := want
		if strings.HasPrefix(want, "#!") {
			plain = "--" + want
		}
		if sc.flagged.Hash() != sha1hex(want) || sc.plain.Hash() != sha1hex(plain) {
			t.Errorf("%s: a form is not the text of lua/%s.lua with its libraries in place", sc.name, sc.name)
		}
	}
	luas, _ := filepath.Glob("lua/*.lua")
	if len(s) != len(luas)-len(libs) {
		t.Errorf("%d scripts in a Store, for %d files of lua/ that are not libraries", len(s), len(luas)-len(libs))
	}

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
	keyRE := regexp.MustCompile(`^\{` + regexp.QuoteMeta(fx.prefix) + `:[0-9]+\}:(z|m|seq|epoch|tn|to|r|n|c|cx|nm)$|^` + regexp.QuoteMeta(fx.prefix) + `:(shards|cursor)$|^\{` +
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
		if !fx.tombstoned(t, id, src) {
			t.Fatalf("no tombstone of source id %q after cancel", src)
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
