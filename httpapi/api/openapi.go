package api

import (
	_ "embed"
	"net/http"
)

// openAPIDocument is the message API's OpenAPI 3.1 document: every /v1 route, its
// parameters, bodies and answers. The package's tests hold the handlers to it (every
// answer they receive is validated against it, and the routes registered here are compared
// with its paths), so a route or field added without it fails there.
//
//go:embed openapi.json
var openAPIDocument []byte

// serveOpenAPI answers GET /v1/openapi.json with the document. It is public, like the
// console's script and style: it holds no data, only what the repository publishes, and
// the tools that read it (client generators, API explorers) fetch it without a token.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPIDocument)
}

// mux is an http.ServeMux that keeps the patterns registered on it, in order, so that
// the tests can compare the routes with the OpenAPI document. Not safe for concurrent
// registration (routes are registered once, before serving).
type mux struct {
	*http.ServeMux
	patterns []string
}

func newMux() *mux { return &mux{ServeMux: http.NewServeMux()} }

// Handle registers h for pattern (http.ServeMux.Handle) and keeps the pattern.
func (m *mux) Handle(pattern string, h http.Handler) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.Handle(pattern, h)
}

// HandleFunc registers f for pattern (http.ServeMux.HandleFunc) and keeps the pattern.
func (m *mux) HandleFunc(pattern string, f func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(f))
}
