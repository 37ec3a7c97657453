// Command configref writes the generated table of docs/configuration.md from the config
// struct tags (the names, defaults and envDoc texts that `bridge --help` prints):
//
//	go run ./cmd/configref          # rewrite the table in place
//	go run ./cmd/configref -check   # exit 1 when the committed page is stale
//
// `go generate ./config/` runs it too. config.TestConfigurationReference fails when the
// committed page differs from what this writes.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/delaybridge/delaybridge/config"
)

func main() {
	check := flag.Bool("check", false, "only report whether the page is up to date (exit 1 when stale)")
	flag.Parse()
	if err := run(*check); err != nil {
		fmt.Fprintln(os.Stderr, "configref:", err)
		os.Exit(1)
	}
}

func run(check bool) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	path := filepath.Join(root, config.ReferencePage)
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	page, err := config.UpdateReference(string(old))
	if err != nil {
		return err
	}
	switch {
	case page == string(old):
		return nil
	case check:
		return fmt.Errorf("%s is stale: run `go run ./cmd/configref`", config.ReferencePage)
	}
	return os.WriteFile(path, []byte(page), 0o644)
}

// moduleRoot is the nearest directory at or above the working directory holding go.mod
// (go generate runs in config/, go run usually at the root).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod at or above the working directory")
		}
		dir = parent
	}
}
