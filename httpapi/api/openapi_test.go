package api

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestOpenAPIDocument: openapi.json is a valid OpenAPI 3.1 document, served as it is
// embedded at /v1/openapi.json without a token (it holds no data) but behind the host
// guard like every route; other methods get 405.
func TestOpenAPIDocument(t *testing.T) {
	s := spec(t)
	if ok, errs := s.valid.ValidateDocument(); !ok {
		t.Fatalf("openapi.json is not a valid OpenAPI document: %v", describe(errs))
	}
	if v := s.model.Version; v != "3.1.0" {
		t.Errorf("openapi %q, want 3.1.0", v)
	}
	srv := serveAPI(t, New(Config{Token: "s3cret"}, nil, nil, nil))
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		req, _ := http.NewRequest(method, srv.URL+"/v1/openapi.json", nil)
		resp, err := srv.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := openAPIDocument
		if method == http.MethodHead {
			want = nil
		}
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" || !bytes.Equal(body, want) {
			t.Errorf("%s without a token: %d %q, %d bytes; want 200 and the embedded document", method, resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
		}
	}
	resp, err := srv.Client.Post(srv.URL+"/v1/openapi.json", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", resp.StatusCode)
	}

	guarded := serveAPI(t, New(Config{}, nil, nil, nil))
	req, _ := http.NewRequest(http.MethodGet, guarded.URL+"/v1/openapi.json", nil)
	req.Host = "evil.test"
	resp, err = guarded.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("Host evil.test without a token: %d, want 403 host_not_allowed", resp.StatusCode)
	}
}

// TestOpenAPIRoutes: every route registered under /v1/ is an operation of openapi.json
// and every operation a route; every documented path has its JSON 405 for other methods,
// whose Allow names the documented ones.
func TestOpenAPIRoutes(t *testing.T) {
	s := spec(t)
	a := &api{cfg: Config{}.withDefaults()}
	registered, fallbacks := map[string]bool{}, map[string]bool{}
	for _, p := range append(a.top().patterns, a.routes().patterns...) {
		method, path, ok := strings.Cut(p, " ")
		if !ok {
			method, path = "", p
		}
		if !strings.HasPrefix(path, "/v1/") {
			continue // the console and the catch-all 404
		}
		if method == "" {
			fallbacks[path] = true
		} else {
			registered[method+" "+path] = true
		}
	}
	documented := map[string]bool{}
	for path, item := range s.model.Paths.PathItems.FromOldest() {
		for method := range item.GetOperations().KeysFromOldest() {
			documented[strings.ToUpper(method)+" "+path] = true
		}
		req := httptest.NewRequest("PATCH", "http://127.0.0.1"+pathParams.ReplaceAllString(path, "x"), nil)
		rec := httptest.NewRecorder()
		a.top().ServeHTTP(rec, req)
		if want := allowOf(item); rec.Code != http.StatusMethodNotAllowed || !sameMethods(rec.Header().Get("Allow"), want) {
			t.Errorf("PATCH %s: %d Allow %q, want 405 Allow %q (register methodNotAllowed for the path)", path, rec.Code, rec.Header().Get("Allow"), want)
		}
	}
	for _, r := range slices.Sorted(keys(registered)) {
		if !documented[r] {
			t.Errorf("route %s is not in openapi.json", r)
		}
	}
	for _, r := range slices.Sorted(keys(documented)) {
		if !registered[r] {
			t.Errorf("openapi.json has %s, which is no route", r)
		}
	}
	for _, p := range slices.Sorted(keys(fallbacks)) {
		if s.model.Paths.PathItems.GetOrZero(p) == nil {
			t.Errorf("405 fallback %s is for a path not in openapi.json", p)
		}
	}
}

var pathParams = regexp.MustCompile(`\{[^}]+\}`)

func keys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestCheckAnswerCatchesDrift: the check that every test's answers go through refuses an
// undocumented field, a missing field, an undocumented status, an undocumented route that
// answers, a wrong Allow, a non-JSON refusal, and a success to a request with an
// undeclared parameter; it takes documented answers.
func TestCheckAnswerCatchesDrift(t *testing.T) {
	s := spec(t)
	answer := func(status int, header http.Header, body string) *http.Response {
		if header == nil {
			header = http.Header{"Content-Type": {"application/json"}}
		}
		return &http.Response{StatusCode: status, Header: header, Body: io.NopCloser(strings.NewReader(body))}
	}
	get := func(target string) *http.Request {
		return httptest.NewRequest(http.MethodGet, "http://127.0.0.1"+target, nil)
	}
	stats := `{"parked":1,"per_shard":[1],"next_due":null,"now":5}`
	for _, tc := range []struct {
		name string
		req  *http.Request
		resp *http.Response
		ok   bool
	}{
		{"documented", get("/v1/stats"), answer(200, nil, stats), true},
		{"documented error", get("/v1/stats"), answer(503, nil, `{"error":"store unavailable"}`), true},
		{"undocumented field", get("/v1/stats"), answer(200, nil, stats[:len(stats)-1]+`,"extra":1}`), false},
		{"missing field", get("/v1/stats"), answer(200, nil, `{"parked":1,"per_shard":[1],"now":5}`), false},
		{"wrong type", get("/v1/stats"), answer(200, nil, `{"parked":"1","per_shard":[1],"next_due":null,"now":5}`), false},
		{"undocumented status", get("/v1/stats"), answer(202, nil, stats), false},
		{"undeclared parameter", get("/v1/stats?verbose=1"), answer(200, nil, stats), false},
		{"undocumented route answering", get("/v1/pause"), answer(200, nil, `{}`), false},
		{"undocumented route refused", get("/v1/pause"), answer(404, nil, `{"error":"no such endpoint"}`), true},
		{"405 naming the methods", httptest.NewRequest(http.MethodPut, "http://127.0.0.1/v1/stats", nil),
			answer(405, http.Header{"Content-Type": {"application/json"}, "Allow": {"GET, HEAD"}}, `{"error":"no"}`), true},
		{"405 with another Allow", httptest.NewRequest(http.MethodPut, "http://127.0.0.1/v1/stats", nil),
			answer(405, http.Header{"Content-Type": {"application/json"}, "Allow": {"GET, HEAD, PUT"}}, `{"error":"no"}`), false},
		{"refusal not JSON", get("/v1/pause"), answer(404, http.Header{"Content-Type": {"text/plain"}}, "404 page not found"), false},
		{"HEAD of a GET route", httptest.NewRequest(http.MethodHead, "http://127.0.0.1/v1/stats", nil), answer(200, nil, ""), true},
		{"outside /v1/", get("/ui/"), answer(200, http.Header{"Content-Type": {"text/html"}}, "<html>"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := io.ReadAll(tc.resp.Body)
			if tc.req.Method == http.MethodHead {
				got = nil
			}
			problems := s.checkAnswer(tc.req, nil, tc.resp, got)
			if (len(problems) == 0) != tc.ok {
				t.Fatalf("problems %q, want ok=%v", problems, tc.ok)
			}
		})
	}
}

// TestTestsUseCheckedClients: the package's tests reach the API only through serveAPI,
// checkedClient, checked or record (openapi_check_test.go), so that every answer they
// receive is held to openapi.json. Raw TCP requests (forged Host headers) stay possible.
func TestTestsUseCheckedClients(t *testing.T) {
	forbidden := map[string]string{
		"http.Get": "srv.Client.Get", "http.Post": "srv.Client.Post", "http.Head": "srv.Client.Head",
		"http.PostForm": "srv.Client.PostForm", "http.DefaultClient": "srv.Client or checkedClient(t)",
		"httptest.NewServer":          "serveAPI(t, h)",
		"httptest.NewUnstartedServer": "serveAPI(t, h)", "httptest.NewTLSServer": "serveAPI(t, h)",
		"httptest.NewRecorder": "record(t, h, req)",
	}
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if name == "openapi_check_test.go" || name == "openapi_test.go" {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok {
				if fn, ok := call.Fun.(*ast.Ident); ok && fn.Name == "checked" {
					return false // checked(t, &http.Client{...}) is the way to a client of one's own
				}
			}
			if lit, ok := n.(*ast.CompositeLit); ok {
				if sel, ok := lit.Type.(*ast.SelectorExpr); ok && sel.Sel.Name == "Client" {
					if x, ok := sel.X.(*ast.Ident); ok && x.Name == "http" {
						t.Errorf("%s: an http.Client of its own bypasses the openapi.json check: use checked(t, &http.Client{...})", fset.Position(lit.Pos()))
					}
				}
			}
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok {
				if use, bad := forbidden[x.Name+"."+sel.Sel.Name]; bad {
					t.Errorf("%s: %s.%s bypasses the openapi.json check: use %s", fset.Position(sel.Pos()), x.Name, sel.Sel.Name, use)
				}
			}
			return true
		})
	}
}
