package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	vErrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/router"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
)

// This file is the one way the package's tests reach the API: serveAPI starts a server
// and hands out a client whose every answer is validated against openapi.json (the
// answer's status, headers and body must be documented for its route; a request answered
// 2xx must conform too, and neither may carry an undeclared field or parameter), and
// record does the same for a handler served in process. TestTestsUseCheckedClients
// keeps other ways out of the package's tests.

// openAPISpec is openapi.json parsed, with its validator. Safe for concurrent use.
type openAPISpec struct {
	model  *v3.Document
	valid  validator.Validator
	router router.Router
}

// loadSpec parses openapi.json once for the package's tests (compiling every schema
// takes a while).
var loadSpec = sync.OnceValues(func() (*openAPISpec, error) {
	doc, err := libopenapi.NewDocument(openAPIDocument)
	if err != nil {
		return nil, fmt.Errorf("parse openapi.json: %w", err)
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		return nil, fmt.Errorf("build openapi.json: %w", err)
	}
	// Strict: a field, parameter or header that the document does not declare is an error
	// here, though the published schemas let clients ignore fields added later. Strict mode
	// takes a map's keys (additionalProperties) for undeclared fields: the maps are listed
	// here (add a new one), and so are the browser headers the guard tests send.
	v, errs := validator.NewValidator(doc, config.WithStrictMode(), config.WithFormatAssertions(),
		config.WithStrictIgnorePaths(strictMaps...), config.WithStrictIgnoredHeadersExtra("Sec-Fetch-Site", "Origin", httpapiActor))
	if len(errs) > 0 {
		return nil, fmt.Errorf("openapi.json: %w", errors.Join(errs...))
	}
	return &openAPISpec{model: &m.Model, valid: v, router: router.NewRouter(&m.Model, router.WithPathOnlyMatching())}, nil
})

// strictMaps are the JSON paths of the document's maps (objects with data as keys).
var strictMaps = []string{"$.body.headers.*", "$.body.in.*", "$.body.out.*", "$.body.by_reason.*",
	"$.body.**.in.*", "$.body.**.out.*", "$.body.**.dead_lettered.*", "$.body.**.quota_rejected.*", "$.body.entries[*].selector.**"}

// httpapiActor is the audit log's actor header (httpapi.ActorHeader).
const httpapiActor = "X-Delay-Actor"

// spec is the parsed document; it fails tb when openapi.json does not parse.
func spec(tb testing.TB) *openAPISpec {
	tb.Helper()
	s, err := loadSpec()
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// testServer is an API served for a test, with the client to reach it by.
type testServer struct {
	*httptest.Server
	// Client validates every answer (checkedClient); use it, or checked(tb) of any other
	// http.Client, for every request.
	Client *http.Client
}

// serveAPI serves h (the API's handler, New) until tb ends.
func serveAPI(tb testing.TB, h http.Handler) *testServer {
	tb.Helper()
	srv := httptest.NewServer(h)
	tb.Cleanup(srv.Close)
	return &testServer{Server: srv, Client: checkedClient(tb)}
}

// checkedClient is an http.Client whose every answer is held to openapi.json; a failed
// check fails tb (Errorf) and the answer is returned as received. In a benchmark nothing
// is checked: a benchmark measures the API, the tests check its answers.
func checkedClient(tb testing.TB) *http.Client {
	return checked(tb, &http.Client{})
}

// checked is c with its transport checking every answer (checkedClient).
func checked(tb testing.TB, c *http.Client) *http.Client {
	if _, bench := tb.(*testing.B); bench {
		return c
	}
	next := c.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	c.Transport = &checkedTransport{tb: tb, spec: spec(tb), next: next}
	return c
}

// checkedTransport validates every answer against the spec (checkAnswer).
type checkedTransport struct {
	tb   testing.TB
	spec *openAPISpec
	next http.RoundTripper
}

func (c *checkedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	resp, err := c.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if streaming(resp) { // an event stream never ends: its status and type only
		for _, p := range c.spec.checkAnswer(req, nil, resp, nil) {
			c.tb.Errorf("openapi.json: %s %s answered %d: %s", req.Method, req.URL.RequestURI(), resp.StatusCode, p)
		}
		return resp, nil
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(got))
	if err != nil {
		return resp, nil // the caller sees the short body; nothing to check
	}
	for _, p := range c.spec.checkAnswer(req, body, resp, got) {
		c.tb.Errorf("openapi.json: %s %s answered %d: %s", req.Method, req.URL.RequestURI(), resp.StatusCode, p)
	}
	return resp, nil
}

// record serves req with h in process and checks the answer as checkedClient does.
func record(tb testing.TB, h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	tb.Helper()
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	req.Body = io.NopCloser(bytes.NewReader(body))
	for _, p := range spec(tb).checkAnswer(req, body, rec.Result(), rec.Body.Bytes()) {
		tb.Errorf("openapi.json: %s %s answered %d: %s", req.Method, req.URL.RequestURI(), rec.Code, p)
	}
	return rec
}

// streaming reports whether resp is an event stream (text/event-stream).
func streaming(resp *http.Response) bool {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return mt == "text/event-stream"
}

// refusedAnyRoute are the answers any method and path may get before a route is chosen
// (the host guard, the cross-origin check, the token, the body limits) or instead of one
// (404, 405).
var refusedAnyRoute = []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound,
	http.StatusMethodNotAllowed, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType, http.StatusServiceUnavailable}

// checkAnswer returns what is wrong with resp (its body got; nil for a stream) as the
// answer to req (its body sent) by the document: a path under /v1/ that the document
// lacks, or a method it lacks there, may only be refused (refusedAnyRoute, in JSON; a
// 405's Allow names the documented methods); a documented operation's answer must be
// documented, and the request too when the answer is a success. Paths outside /v1/ (the
// console) are not the document's.
func (s *openAPISpec) checkAnswer(req *http.Request, sent []byte, resp *http.Response, got []byte) []string {
	if !strings.HasPrefix(req.URL.Path, "/v1/") {
		return nil
	}
	asGET := req
	if req.Method == http.MethodHead { // a GET route answers HEAD too, without a body
		asGET = req.Clone(req.Context())
		asGET.Method = http.MethodGet
	}
	route, err := s.router.FindRoute(asGET)
	if err != nil {
		return s.checkRefused(route, resp, got)
	}
	code := strconv.Itoa(resp.StatusCode)
	documented := route.Operation.Responses.Codes.GetOrZero(code)
	if documented == nil {
		documented = route.Operation.Responses.Default
	}
	if documented == nil {
		return []string{fmt.Sprintf("status %d is not documented for %s %s", resp.StatusCode, route.Method, route.Path)}
	}
	// The document itself: TestOpenAPIDocument compares its bytes with openapi.json.
	if req.Method == http.MethodHead || got == nil || route.Path == "/v1/openapi.json" {
		return checkMediaType(documented, resp)
	}
	var problems []string
	resp.Body = io.NopCloser(bytes.NewReader(got))
	if ok, errs := s.valid.ValidateHttpResponse(req, resp); !ok {
		problems = append(problems, describe(errs)...)
	}
	if resp.StatusCode < 300 {
		r := req.Clone(req.Context())
		r.Body = io.NopCloser(bytes.NewReader(sent))
		if ok, errs := s.valid.ValidateHttpRequestSync(r); !ok {
			problems = append(problems, describe(errs)...)
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(got))
	return problems
}

// checkRefused is checkAnswer of an undocumented method or path (route: the path's, for
// an undocumented method; else nil).
func (s *openAPISpec) checkRefused(route *router.Route, resp *http.Response, got []byte) []string {
	if !slices.Contains(refusedAnyRoute, resp.StatusCode) {
		if route != nil {
			return []string{fmt.Sprintf("method not in openapi.json for %s, but answered %d", route.Path, resp.StatusCode)}
		}
		return []string{fmt.Sprintf("path not in openapi.json, but answered %d", resp.StatusCode)}
	}
	var e struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(got, &e); err != nil || e.Error == "" || resp.Header.Get("Content-Type") != "application/json" {
		return []string{fmt.Sprintf("a refusal is JSON {\"error\": ...}, got %q: %s", resp.Header.Get("Content-Type"), got)}
	}
	if resp.StatusCode == http.StatusMethodNotAllowed && route != nil {
		if want := allowOf(route.PathItem); !sameMethods(resp.Header.Get("Allow"), want) {
			return []string{fmt.Sprintf("Allow %q, but openapi.json has %q for %s", resp.Header.Get("Allow"), want, route.Path)}
		}
	}
	return nil
}

// allowOf is the Allow header that a path's 405 must carry: its documented methods, HEAD
// with GET, in alphabetical order.
func allowOf(item *v3.PathItem) string {
	var methods []string
	for m := range item.GetOperations().KeysFromOldest() {
		methods = append(methods, strings.ToUpper(m))
		if strings.EqualFold(m, http.MethodGet) {
			methods = append(methods, http.MethodHead)
		}
	}
	slices.Sort(methods)
	return strings.Join(methods, ", ")
}

// sameMethods reports whether two Allow values name the same methods, in any order.
func sameMethods(a, b string) bool {
	split := func(s string) []string {
		ms := strings.Split(s, ",")
		for i := range ms {
			ms[i] = strings.TrimSpace(ms[i])
		}
		slices.Sort(ms)
		return ms
	}
	return slices.Equal(split(a), split(b))
}

// checkMediaType checks, for an answer whose body is not read (HEAD, a stream), that its
// Content-Type is one the documented response declares (none: no body).
func checkMediaType(documented *v3.Response, resp *http.Response) []string {
	if documented.Content == nil || documented.Content.Len() == 0 {
		return nil
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if documented.Content.GetOrZero(mt) == nil {
		return []string{fmt.Sprintf("Content-Type %q is not documented for this answer", resp.Header.Get("Content-Type"))}
	}
	return nil
}

// describe flattens the validator's errors, each schema failure with where it was.
func describe(errs []*vErrors.ValidationError) []string {
	var out []string
	for _, e := range errs {
		line := e.Message
		if e.Reason != "" {
			line += ": " + e.Reason
		}
		for _, f := range e.SchemaValidationErrors {
			line += fmt.Sprintf("; at %q: %s", f.FieldPath, f.Reason)
		}
		out = append(out, line)
	}
	return out
}
