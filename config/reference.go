package config

import (
	"errors"
	"regexp"
	"strings"
)

//go:generate go run ../cmd/configref

// The generated part of docs/configuration.md lies between these two lines; the rest of
// the page is written by hand.
const (
	ReferenceBegin = "<!-- BEGIN GENERATED: go run ./cmd/configref (from the config struct tags); do not edit by hand -->"
	ReferenceEnd   = "<!-- END GENERATED -->"
)

// ReferencePage is the page that holds the generated table, relative to the module root.
const ReferencePage = "docs/configuration.md"

// ReferenceTable renders [Variables] (names, defaults and the envDoc struct tags) as a
// Markdown table, in the order of `bridge --help`.
func ReferenceTable() string {
	var b strings.Builder
	b.WriteString("| variable | default | meaning |\n|---|---|---|\n")
	for _, v := range Variables() {
		def := "empty"
		if v.Default != "" {
			def = "`" + v.Default + "`"
		}
		b.WriteString("| `" + v.Name + "` | " + def + " | " + markdownText(v.Doc) + " |\n")
	}
	return b.String()
}

// UpdateReference returns page with the part between [ReferenceBegin] and [ReferenceEnd]
// replaced by [ReferenceTable]. It fails when the markers are missing or out of order.
func UpdateReference(page string) (string, error) {
	before, rest, ok := strings.Cut(page, ReferenceBegin+"\n")
	if !ok {
		return "", errors.New(ReferencePage + ": no line " + ReferenceBegin)
	}
	_, after, ok := strings.Cut(rest, ReferenceEnd)
	if !ok {
		return "", errors.New(ReferencePage + ": no line " + ReferenceEnd + " after " + ReferenceBegin)
	}
	return before + ReferenceBegin + "\n" + ReferenceTable() + ReferenceEnd + after, nil
}

var varName = regexp.MustCompile(`BRIDGE_[A-Z0-9_]*[A-Z0-9]`)

// markdownText writes a struct tag's plain text for a Markdown table cell: variable names
// as code, and the characters Markdown or the table would read (\ | * < >) escaped.
func markdownText(s string) string {
	esc := strings.NewReplacer(`\`, `\\`, "|", `\|`, "*", `\*`, "<", "&lt;", ">", "&gt;")
	var b strings.Builder
	last := 0
	for _, m := range varName.FindAllStringIndex(s, -1) {
		b.WriteString(esc.Replace(s[last:m[0]]))
		b.WriteString("`" + s[m[0]:m[1]] + "`")
		last = m[1]
	}
	b.WriteString(esc.Replace(s[last:]))
	return b.String()
}
