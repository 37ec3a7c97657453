package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/delaybridge/delaybridge/contract"
)

// crossOrigin refuses, with 403 and without reading the body, a change (any method but
// GET, HEAD and OPTIONS) that a browser sent from another origin (docs/contract.md section
// 8): net/http's CrossOriginProtection decides. A Sec-Fetch-Site other than same-origin
// or none is refused (cross-site, and same-site too: another port of the same host is
// another origin); without Sec-Fetch-Site (a browser before 2023) an Origin whose host is
// not the request's Host is refused; a request with neither header is not a browser's
// (curl, the CLI) and passes. It runs before the token check: a forged request is refused
// whether or not the browser would have added credentials.
//
// GET /v1/events is judged as a change: a stream from another origin is refused before
// it holds a tail (an EventSource is a GET the page cannot otherwise be kept from opening).
func crossOrigin(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		judged := r
		if r.URL.Path == eventsPath {
			judged = r.Clone(r.Context())
			judged.Method = http.MethodPost
		}
		if err := cop.Check(judged); err != nil {
			refuse(w, http.StatusForbidden, fmt.Sprintf("%s: %v (Sec-Fetch-Site %q, Origin %q): the API takes changes only from its own origin or from clients that are not browsers",
				contract.ReasonCrossOrigin, err, r.Header.Get("Sec-Fetch-Site"), r.Header.Get("Origin")))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// requireJSON refuses, with 415 and without reading the body, a request whose
// Content-Type is not application/json (parameters such as charset are allowed): a
// browser sends a text/plain or form body cross-site without a preflight, never an
// application/json one. It wraps the handlers that take a body (POST).
func requireJSON(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ct := r.Header.Get("Content-Type")
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			refuse(w, http.StatusUnsupportedMediaType, fmt.Sprintf("%s: Content-Type %q: a POST body must be Content-Type: application/json",
				contract.ReasonNotJSON, ct))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// errTrailing: a body holds more than one JSON value.
var errTrailing = errors.New("trailing data after the JSON body")

// decodeBody decodes a request body that holds exactly one JSON value (whitespace around
// it allowed) into v, refusing unknown fields. A body over the limit returns the
// *http.MaxBytesError; data after the value returns an error wrapping errTrailing.
func decodeBody(body io.Reader, v any) error {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	_, err := dec.Token()
	switch tooBig := (*http.MaxBytesError)(nil); {
	case errors.Is(err, io.EOF):
		return nil
	case errors.As(err, &tooBig):
		return err
	}
	return errTrailing
}

// writeBodyError answers a body that decodeBody refused: 413 over the limit, else 400
// invalid_request. It reports whether the body was too large.
func writeBodyError(w http.ResponseWriter, err error) bool {
	if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over the limit of %d bytes", tooBig.Limit))
		return true
	}
	writeError(w, http.StatusBadRequest, contract.ReasonInvalidRequest+": invalid JSON body: "+err.Error())
	return false
}
