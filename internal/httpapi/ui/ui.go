// Package ui is the web console (GET /ui/ on the message API's listener): a page, a script
// and a style sheet embedded in the binary. They hold no data; the page reads everything
// from the message API with the API's bearer token (docs/design.md, "Web console").
package ui

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// Handler serves the console's files under /ui/ (/ui/ itself is index.html), with a
// Content-Security-Policy that allows only this origin's script, style and API calls.
// It needs no token: the files hold no data. It does not block.
func Handler() http.Handler {
	files, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded directory is part of the binary
	}
	fsrv := http.StripPrefix("/ui/", http.FileServer(http.FS(files)))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		fsrv.ServeHTTP(w, r)
	})
}
