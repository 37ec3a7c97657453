// Package ui is the web console (GET /ui/ on the message API's listener): a page, a script
// and a style sheet embedded in the binary. They hold no data; the page reads everything
// from the message API with the API's bearer token, and is itself answered with 401 (its
// body still the page, which asks for the token) to a request without that token
// (docs/design.md, "Web console").
package ui
