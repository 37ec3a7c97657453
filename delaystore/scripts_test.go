package delaystore

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// fileOf is script id's file as written (lua/<name>.lua).
func fileOf(t testing.TB, id scriptID) string {
	t.Helper()
	src, err := luaFile(scriptDefs[id].name + ".lua")
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// sourceOf is script id's source, its libraries in place of its include lines.
func sourceOf(t testing.TB, id scriptID) string {
	t.Helper()
	src, err := scriptDefs[id].source()
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// TestScriptTable holds scriptDefs to lua/: every file is a script of the table or a
// library a script includes, and never both; every file the table names exists; a
// script's "--!include" lines are its includes, in order, each a file of lua/ once; its
// first line declares its flags; and its source keeps no include line.
func TestScriptTable(t *testing.T) {
	paths, err := filepath.Glob("lua/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	onDisk := map[string]bool{}
	for _, p := range paths {
		onDisk[filepath.Base(p)] = true
	}
	scripts, libs := map[string]bool{}, map[string]bool{}
	includeRE := regexp.MustCompile(`(?m)^--!include (.*)$`)
	for id, d := range scriptDefs {
		if d.name == "" {
			t.Errorf("script %d has no entry in scriptDefs", id)
			continue
		}
		file := d.name + ".lua"
		if scripts[file] {
			t.Errorf("%s: in scriptDefs twice", d.name)
		}
		scripts[file] = true
		if !onDisk[file] {
			t.Errorf("%s: scriptDefs names lua/%s, which does not exist", d.name, file)
			continue
		}
		raw, err := os.ReadFile(filepath.Join("lua", file))
		if err != nil {
			t.Fatal(err)
		}
		src := string(raw)
		var lines []string
		for _, m := range includeRE.FindAllStringSubmatch(src, -1) {
			lines = append(lines, m[1])
		}
		if !slices.Equal(lines, d.includes) {
			t.Errorf("%s: include lines %q, scriptDefs says %q", d.name, lines, d.includes)
		}
		for _, lib := range d.includes {
			libs[lib] = true
			if !onDisk[lib] {
				t.Errorf("%s: includes lua/%s, which does not exist", d.name, lib)
			}
		}
		first, _, _ := strings.Cut(src, "\n")
		switch {
		case d.flags == "" && strings.HasPrefix(first, "#!"):
			t.Errorf("%s: first line %q, scriptDefs says no flags", d.name, first)
		case d.flags != "" && first != "#!lua flags="+d.flags:
			t.Errorf("%s: first line %q, scriptDefs says flags=%s", d.name, first, d.flags)
		}
		if s, err := d.source(); err != nil {
			t.Errorf("%s: %v", d.name, err)
		} else if m := includeRE.FindString(s); m != "" {
			t.Errorf("%s: source keeps the line %q", d.name, m)
		}
	}
	for file := range onDisk {
		switch {
		case scripts[file] && libs[file]:
			t.Errorf("lua/%s is both a script and a library", file)
		case !scripts[file] && !libs[file]:
			t.Errorf("lua/%s is neither a script of scriptDefs nor a library one includes", file)
		}
	}
	for lib := range libs {
		raw, err := os.ReadFile(filepath.Join("lua", lib))
		if err == nil && includeRE.Match(raw) {
			t.Errorf("library lua/%s has an include line of its own", lib)
		}
	}
}
