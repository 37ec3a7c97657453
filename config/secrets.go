package config

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/delaybridge/delaybridge/internal/envconf"
)

// secretVars are the variables (without the prefix) whose values are secret: never
// printed, never logged. Each can also be given as the content of a file named by the
// variable with "_FILE" appended (setting both is an error).
var secretVars = []string{"REDIS_PASSWORD", "KAFKA_SASL_PASSWORD", "API_TOKEN"}

// maxSecretFile bounds the size of a secret file, so that a wrong path (a log file, a
// device) fails clearly instead of loading it.
const maxSecretFile = 64 << 10

// readSecretFiles replaces, in vars, every X_FILE of secretVars by X set to the file's
// content, one trailing newline (\n or \r\n) trimmed. Problems name the variable and the
// path, never the content.
func readSecretFiles(vars map[string]string) []*VarError {
	var ps []*VarError
	for _, name := range secretVars {
		fileVar := Prefix + name + "_FILE"
		path, ok := vars[fileVar]
		if !ok || path == "" {
			continue
		}
		if vars[Prefix+name] != "" {
			ps = append(ps, &VarError{fileVar, "set only one of " + Prefix + name + " and " + fileVar})
			continue
		}
		b, err := readSmallFile(path)
		if err != nil {
			ps = append(ps, &VarError{fileVar, err.Error()})
			continue
		}
		s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		if s == "" {
			ps = append(ps, &VarError{fileVar, envconf.Quote(path) + " is empty"})
			continue
		}
		vars[Prefix+name] = s
	}
	return ps
}

func readSmallFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err // *PathError: operation, path and cause; no content
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxSecretFile {
		return nil, fmt.Errorf("%s: larger than 64 KiB, not a secret file", envconf.Quote(path))
	}
	return b, nil
}

// Secret returns secret variable name (without the prefix: "API_TOKEN") as the bridge
// reads it from environ: the variable, or the content of name_FILE, with the same rules
// (both set, an unreadable or empty file: an error naming the variable, never the
// content). The CLI uses it, so that it takes the token exactly as `bridge run` does.
func Secret(environ []string, name string) (string, error) {
	env := EnvMap(environ)
	vars := map[string]string{}
	for _, k := range []string{Prefix + name, Prefix + name + "_FILE"} {
		if v, ok := env[k]; ok {
			vars[k] = v
		}
	}
	if ps := readSecretFiles(vars); len(ps) > 0 {
		return "", ps[0]
	}
	return vars[Prefix+name], nil
}
