package delaystore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// luaFiles are the store's Lua files, embedded at build time: the scripts of scriptDefs
// and the libraries they include. No script text is ever built from data
// (TestScriptsAreConstants).
//
//go:embed lua/*.lua
var luaFiles embed.FS

// scriptID names one of the store's scripts: an index into scriptDefs and into a Store's
// scriptSet.
type scriptID uint8

// The store's scripts, one per state change (docs/design.md, "Scripts").
const (
	scriptPark scriptID = iota
	scriptClaim
	scriptAck
	scriptRetry
	scriptCancel
	scriptMember
	scriptRate
	scriptScan
	scriptBulk
	scriptCounts
	scriptStats
	scriptBulkForget
	scriptAudit
	scriptAuditList
	scriptQuotaCount
	scriptIntern
	scriptPause
	scriptUnpause
	numScripts
)

// scriptDef describes one store script.
type scriptDef struct {
	// name is the script's file, lua/<name>.lua, and its name in Init's errors and in the
	// ScriptTimer's reports.
	name string
	// includes are the libraries, files of lua/ that are not scripts of their own, whose
	// text stands in for the script's lines "--!include <library>", in the order of those
	// lines: envelope.lua, the functions on stored envelopes; tombs.lua, tombstones; groups.lua, the multi-shard
	// calling convention (groups.go); settled.lua, the reply of one group of ack and retry;
	// quota.lua, the counts of BRIDGE_TARGET_QUOTA (quota.go).
	includes []string
	// flags are the Redis 7 script flags that the file's first line declares
	// ("#!lua flags=<flags>"), "" when it declares none. A script with flags also has an
	// unflagged form (script).
	flags string
}

// scriptDefs is the one list of the store's scripts: a Store's scripts (newScripts),
// their loading in Init (loadScripts), their two forms and the names ScriptTimer reports
// all derive from it. TestScriptTable holds it to lua/: every file is a script here or a
// library one includes, includes and flags as the files say.
var scriptDefs = [numScripts]scriptDef{
	scriptPark:       {name: "park", includes: []string{"envelope.lua", "tombs.lua", "groups.lua", "quota.lua", "chain.lua"}}, // no flags: refused when Redis is full
	scriptClaim:      {name: "claim", includes: []string{"groups.lua"}, flags: "allow-oom"},
	scriptAck:        {name: "ack", includes: []string{"envelope.lua", "tombs.lua", "groups.lua", "settled.lua", "quota.lua", "chain.lua"}, flags: "allow-oom"},
	scriptRetry:      {name: "retry", includes: []string{"envelope.lua", "groups.lua", "settled.lua"}, flags: "allow-oom"},
	scriptCancel:     {name: "cancel", includes: []string{"envelope.lua", "quota.lua", "tombs.lua", "chain.lua"}, flags: "allow-oom"},
	scriptMember:     {name: "member", flags: "allow-oom"},
	scriptRate:       {name: "rate", flags: "allow-oom"},
	scriptScan:       {name: "scan", includes: []string{"envelope.lua"}, flags: "no-writes"},
	scriptBulk:       {name: "bulk", includes: []string{"envelope.lua", "tombs.lua", "quota.lua", "chain.lua"}, flags: "allow-oom"},
	scriptCounts:     {name: "counts", includes: []string{"envelope.lua"}}, // no flags: refused when Redis is full
	scriptQuotaCount: {name: "quotacount"},                                 // no flags: refused when Redis is full
	scriptStats:      {name: "stats"},                                      // no flags: refused when Redis is full
	scriptBulkForget: {name: "bulkforget", flags: "allow-oom"},
	scriptIntern:     {name: "intern"}, // no flags: refused when Redis is full, as park is
	scriptAudit:      {name: "audit", flags: "allow-oom"},
	scriptAuditList:  {name: "auditlist", flags: "no-writes"},
	scriptPause:      {name: "pause", flags: "allow-oom"},
	scriptUnpause:    {name: "unpause", includes: []string{"envelope.lua"}, flags: "allow-oom"},
}

// luaFile returns the text of lua/<file>.
func luaFile(file string) (string, error) {
	b, err := luaFiles.ReadFile("lua/" + file)
	if err != nil {
		return "", fmt.Errorf("lua file: %w", err)
	}
	return string(b), nil
}

// includeLine is the line of a script that stands for library lib, with the newlines
// around it.
func includeLine(lib string) string { return "\n--!include " + lib + "\n" }

// source returns the script's file with each of its include lines replaced by the
// library's text, a shebang staying the first line. It only puts files of this package
// together: no text is ever built from data (TestScriptsAreConstants).
func (d scriptDef) source() (string, error) {
	src, err := luaFile(d.name + ".lua")
	if err != nil {
		return "", fmt.Errorf("script %s: %w", d.name, err)
	}
	for _, lib := range d.includes {
		text, err := luaFile(lib)
		if err != nil {
			return "", fmt.Errorf("script %s: %w", d.name, err)
		}
		if !strings.Contains(src, includeLine(lib)) {
			return "", fmt.Errorf("script %s: no line --!include %s", d.name, lib)
		}
		src = strings.Replace(src, includeLine(lib), "\n"+text, 1)
	}
	return src, nil
}

// scriptSet is a Store's scripts, by scriptID.
type scriptSet [numScripts]*script

// newScripts builds every script of scriptDefs.
func newScripts() (scriptSet, error) {
	var set scriptSet
	for id, d := range scriptDefs {
		sc, err := newScript(d)
		if err != nil {
			return scriptSet{}, err
		}
		set[id] = sc
	}
	return set, nil
}

// loadScripts loads every script (script.Load), in scriptDefs order.
func (s *Store) loadScripts(ctx context.Context) error {
	for _, sc := range s.scripts {
		if err := sc.Load(ctx, s.rdb).Err(); err != nil {
			return fmt.Errorf("init: load script %s: %w", sc.name, err)
		}
	}
	return nil
}

// script is one store script, run by SHA with a fallback to EVAL (go-redis Script), in
// one of two forms: its source as written, whose first line may declare Redis 7 script
// flags ("#!lua flags=allow-oom"), and unflagged, the same source with that line made a
// comment, for servers that cannot compile a shebang (Redis 6, miniredis in `bridge dev`).
// Load picks the form the server takes; EvalSha, Eval and Run use the picked form, so the
// EVAL resent after NOSCRIPT does too. Safe for concurrent use.
type script struct {
	name           string        // scriptDef.name
	flagged, plain *redis.Script // plain == flagged when the source declares no flags
	srcs           []string      // the forms' texts, flagged first (one when plain == flagged)
	usePlain       atomic.Bool
}

// newScript builds d's forms: the unflagged one only when d declares flags.
func newScript(d scriptDef) (*script, error) {
	src, err := d.source()
	if err != nil {
		return nil, err
	}
	sc := &script{name: d.name, flagged: redis.NewScript(src), srcs: []string{src}}
	sc.plain = sc.flagged
	if d.flags != "" {
		sc.plain = redis.NewScript(unflagged(src))
		sc.srcs = append(sc.srcs, unflagged(src))
	}
	return sc, nil
}

// label is sc's name for the script timer, "" for no script.
func (sc *script) label() string {
	if sc == nil {
		return ""
	}
	return sc.name
}

// unflagged returns src with a leading "#!" line turned into a Lua comment (line numbers
// in error messages stay the same); a src without one is returned as is. It only comments
// a constant out: no text is ever built from data.
func unflagged(src string) string {
	if strings.HasPrefix(src, "#!") {
		return "--" + src
	}
	return src
}

// current is the form in use.
func (sc *script) current() *redis.Script {
	if sc.usePlain.Load() {
		return sc.plain
	}
	return sc.flagged
}

// Load loads the flagged form (SCRIPT LOAD, every master in Cluster). When the server
// cannot compile it (Redis 6: "Error compiling script ... near '#'", miniredis alike) and
// takes the unflagged form, the unflagged form is used from then on, and that load's
// answer is returned. Any other error (connection, BUSY, NOPERM) decides nothing and is
// returned.
func (sc *script) Load(ctx context.Context, c redis.Scripter) *redis.StringCmd {
	cmd := sc.flagged.Load(ctx, c)
	if err := cmd.Err(); !sc.refused(err) {
		if err == nil {
			sc.usePlain.Store(false)
		}
		return cmd
	}
	plain := sc.plain.Load(ctx, c)
	if plain.Err() != nil {
		return cmd // neither form: the flagged form's error says more
	}
	sc.usePlain.Store(true)
	return plain
}

// EvalSha sends EVALSHA of the form in use (see redis.Script.EvalSha).
func (sc *script) EvalSha(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	return sc.current().EvalSha(ctx, c, keys, args...)
}

// Eval sends EVAL with the source of the form in use.
func (sc *script) Eval(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	return sc.current().Eval(ctx, c, keys, args...)
}

// Run runs the form in use by SHA, falling back to EVAL on NOSCRIPT. A store used without
// Init (the audit entry of `bridge redrive`) has not loaded its scripts: when the server
// cannot compile the flagged form, Run switches to the unflagged one, as Load does, and
// runs that (the script had not run: the server refuses it before the first line).
func (sc *script) Run(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	cmd := sc.current().Run(ctx, c, keys, args...)
	if sc.usePlain.Load() || !sc.refused(cmd.Err()) {
		return cmd
	}
	sc.usePlain.Store(true)
	return sc.plain.Run(ctx, c, keys, args...)
}

// refused reports whether err is the server refusing to compile the flagged form (Redis 6:
// "Error compiling script ... near '#'", miniredis alike) of a script that has an
// unflagged one.
func (sc *script) refused(err error) bool {
	var rerr redis.Error
	return err != nil && sc.plain != sc.flagged && errors.As(err, &rerr) &&
		strings.Contains(strings.ToLower(err.Error()), "error compiling script")
}

// hashes are the SHA-1 of both forms.
func (sc *script) hashes() []string { return []string{sc.flagged.Hash(), sc.plain.Hash()} }

// memoryState is what parks learned about Redis memory: full after a park refused with
// -OOM, not full after a park that wrote, and how many parks were refused (costs no Redis
// work). Safe for concurrent use.
type memoryState struct {
	full     atomic.Bool
	refusals atomic.Uint64
}

// note reads the replies of one park, a reply per shard: any shard refused for memory
// sets full; otherwise any message written (a reply pair {due, 0}) clears it.
func (m *memoryState) note(replies []groupReply) {
	refused, wrote := false, false
	for _, r := range replies {
		res, err := r.slice()
		if err != nil {
			refused = refused || IsOOM(err)
			continue
		}
		for _, r := range res {
			if pair, ok := r.([]any); ok && len(pair) == 2 {
				if n, err := toInt64(pair[1]); err == nil && n == 0 {
					wrote = true
				}
			}
		}
	}
	switch {
	case refused:
		m.refusals.Add(1)
		m.full.Store(true)
	case wrote:
		m.full.Store(false)
	}
}

// IsOOM reports whether err is Redis refusing a write for memory (maxmemory reached under
// noeviction): "-OOM command not allowed when used memory > 'maxmemory'", also when a
// script's call raised it (Redis 6 wraps it in "ERR Error running script ...").
func IsOOM(err error) bool {
	return err != nil && (redis.HasErrorPrefix(err, "OOM") || strings.Contains(err.Error(), "OOM command not allowed"))
}

// MemoryFull reports whether the last park that learned something about Redis memory was
// refused for it (-OOM): full from a refused park until a park writes again; refusals
// counts the Park calls refused for memory so far (it only grows: a reader that compares
// it sees refusals between two looks, however short the full moments were). It does no
// I/O and is safe for concurrent use.
func (s *Store) MemoryFull() (full bool, refusals uint64) {
	return s.mem.full.Load(), s.mem.refusals.Load()
}
