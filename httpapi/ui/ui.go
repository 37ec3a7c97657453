package ui

import (
	"bytes"
	"embed"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed static
var static embed.FS

// Handler serves the console's files under /ui/ (/ui/ itself is index.html), with a
// Content-Security-Policy that allows only this origin's script, style and API calls.
// The page is served with 200 to a request that authorized accepts (the API's token) and
// with 401 and WWW-Authenticate otherwise, its body still the page, which asks for the
// token and sends it with every API call; the script and style sheet hold no data and are
// served to anyone (a browser loads them without the token). Safe for concurrent use; it
// does not block.
func Handler(authorized func(*http.Request) bool) http.Handler {
	files := http.FileServer(http.FS(static))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		name := strings.TrimPrefix(r.URL.Path, "/ui/")
		if name == "" {
			name = "index.html"
		}
		req := r.Clone(r.Context())
		req.URL.Path = path.Join("/static", path.Clean("/"+name))
		if req.URL.Path != "/static/index.html" {
			files.ServeHTTP(w, req)
			return
		}
		// FileServer redirects .../index.html to .../: serve the page itself.
		page, err := static.ReadFile("static/index.html")
		if err != nil {
			http.Error(w, "console page missing from the build", http.StatusInternalServerError)
			return
		}
		if !authorized(r) {
			h.Set("WWW-Authenticate", `Bearer realm="delaybridge"`)
			h.Set("Content-Type", "text/html; charset=utf-8")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write(page)
			return
		}
		http.ServeContent(w, req, "index.html", time.Time{}, bytes.NewReader(page))
	})
}
