package config

import (
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/delaybridge/delaybridge/internal/envconf"
)

// Var describes one variable, for `bridge --help`.
type Var struct {
	// Name is the full variable name, e.g. "BRIDGE_SHARDS".
	Name string
	// Default is the value used when the variable is unset or empty ("" for none).
	Default string
	// Doc is a one-line description.
	Doc string
}

// field is a variable and where it lives in Config.
type field struct {
	Var
	goName string
	index  []int
	typ    reflect.Type
}

// fields lists every variable in struct order, from the struct tags.
var fields = sync.OnceValue(func() []field {
	var out []field
	var walk func(t reflect.Type, index []int)
	walk = func(t reflect.Type, index []int) {
		for i := 0; i < t.NumField(); i++ {
			sf := t.Field(i)
			idx := append(append([]int(nil), index...), i)
			name, _, _ := strings.Cut(sf.Tag.Get("env"), ",")
			if name == "" && sf.Type.Kind() == reflect.Struct {
				walk(sf.Type, idx)
				continue
			}
			if name == "" || name == "-" {
				continue
			}
			doc := sf.Tag.Get("envDoc")
			out = append(out, field{
				Var:    Var{Name: Prefix + name, Default: sf.Tag.Get("envDefault"), Doc: doc},
				goName: sf.Name,
				index:  idx,
				typ:    sf.Type,
			})
		}
	}
	walk(reflect.TypeOf(Config{}), nil)
	return out
})

// Variables lists every variable the bridge reads, in a stable order, with its default
// and a one-line description.
func Variables() []Var {
	fs := fields()
	out := make([]Var, len(fs))
	for i, f := range fs {
		out[i] = f.Var
	}
	return out
}

// Unknown returns the BRIDGE_* keys of environ that are not variables of the bridge
// (sorted), e.g. typos, for a warning. Not an error: other software (such as Kubernetes
// service links for a service named "bridge") may set such variables.
func Unknown(environ map[string]string) []string {
	known := map[string]bool{}
	for _, f := range fields() {
		known[f.Name] = true
	}
	var out []string
	for k := range environ {
		if strings.HasPrefix(k, Prefix) && !known[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// Redacted returns the effective configuration as variable name -> value, for printing:
// lists comma-joined, durations in Go syntax, secrets (BRIDGE_API_TOKEN, BRIDGE_REDIS_PASSWORD,
// BRIDGE_KAFKA_SASL_PASSWORD) as "[redacted]" when set,
// and passwords, tokens or users in BRIDGE_REDIS_URL and BRIDGE_NATS_URL replaced by
// "xxxxx".
func (c Config) Redacted() map[string]string {
	v := reflect.ValueOf(c)
	out := make(map[string]string, len(fields()))
	for _, f := range fields() {
		out[f.Name] = format(v.FieldByIndex(f.index))
	}
	for _, name := range secretVars {
		if out[Prefix+name] != "" {
			out[Prefix+name] = "[redacted]"
		}
	}
	out[Prefix+"REDIS_URL"] = redactURLs(c.Redis.URL)
	out[Prefix+"NATS_URL"] = redactURLs(c.NATS.URL)
	return out
}

func format(v reflect.Value) string {
	switch x := v.Interface().(type) {
	case string:
		return x
	case []string:
		return strings.Join(x, ",")
	case time.Duration:
		return envconf.Duration(x)
	case int:
		return strconv.Itoa(x)
	}
	return fmt.Sprint(v.Interface())
}

// redactURLs redacts the user information of each comma-separated URL. An item that does
// not parse is replaced as a whole, since it may hold a secret.
func redactURLs(s string) string {
	if s == "" {
		return ""
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = redactURL(strings.TrimSpace(p))
	}
	return strings.Join(parts, ",")
}

func redactURL(s string) string {
	if s == "" {
		return ""
	}
	if !strings.Contains(s, "://") {
		if strings.Contains(s, "@") {
			return "xxxxx@" + s[strings.LastIndexByte(s, '@')+1:]
		}
		return s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "[redacted: not a valid URL]"
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		} else {
			u.User = url.User("xxxxx") // a lone user part may be a token (NATS)
		}
	}
	return u.String()
}

// parseProblem turns an error of the env parser, which names a Go field, into a
// VarError naming the variable.
func parseProblem(err error, vars map[string]string) *VarError {
	var pe env.ParseError
	if !errors.As(err, &pe) {
		return &VarError{Var: Prefix + "*", Problem: err.Error()}
	}
	var f *field
	for i, cand := range fields() {
		if cand.goName == pe.Name && cand.typ == pe.Type {
			f = &fields()[i]
			break
		}
	}
	if f == nil {
		return &VarError{Var: Prefix + "*", Problem: err.Error()}
	}
	raw, ok := vars[f.Name]
	if !ok {
		raw = f.Default
	}
	q := envconf.Quote(raw)
	switch {
	case f.typ == reflect.TypeOf(time.Duration(0)):
		return &VarError{f.Name, q + " is not a duration (e.g. 30s, 5m, 1h30m)"}
	case f.typ.Kind() == reflect.Int && errors.Is(pe.Err, strconv.ErrRange):
		return &VarError{f.Name, q + " is out of range"}
	case f.typ.Kind() == reflect.Int:
		return &VarError{f.Name, q + " is not an integer"}
	}
	return &VarError{f.Name, q + ": " + pe.Err.Error()}
}
