package delaystore

import (
	"context"
	_ "embed"
	"errors"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/envelope.lua
	envelopeLib string
	//go:embed lua/groups.lua
	groupsLib string
)

// Include lines: a script's line "--!include <name>" stands for that library: envelope.lua,
// the functions on stored envelopes that park, ack, cancel and bulk share; groups.lua, the
// multi-shard calling convention of park, claim, ack and retry (groups.go).
const (
	includeEnvelope = "\n--!include envelope.lua\n"
	includeGroups   = "\n--!include groups.lua\n"
)

// withLibs returns src with its include lines replaced by the libraries' sources (src
// without one is returned as is). The libraries are Lua of this package only: no text is
// ever built from data (TestScriptsAreConstants).
func withLibs(src string) string {
	src = strings.Replace(src, includeEnvelope, "\n"+envelopeLib, 1)
	return strings.Replace(src, includeGroups, "\n"+groupsLib, 1)
}

// script is one store script, run by SHA with a fallback to EVAL (go-redis Script), in
// one of two forms: its source as written, whose first line may declare Redis 7 script
// flags ("#!lua flags=allow-oom"), and unflagged, the same source with that line made a
// comment, for servers that cannot compile a shebang (Redis 6, miniredis in `bridge dev`).
// Load picks the form the server takes; EvalSha, Eval and Run use the picked form, so the
// EVAL resent after NOSCRIPT does too. Safe for concurrent use.
type script struct {
	flagged, plain *redis.Script // plain == flagged when the source declares no flags
	usePlain       atomic.Bool
}

// newScript pairs a script's two forms; plain may be nil when the source has no shebang.
func newScript(flagged, plain *redis.Script) *script {
	if plain == nil {
		plain = flagged
	}
	return &script{flagged: flagged, plain: plain}
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
	var refused redis.Error
	if err := cmd.Err(); err == nil || sc.plain == sc.flagged || !errors.As(err, &refused) ||
		!strings.Contains(strings.ToLower(err.Error()), "compil") {
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

// Run runs the form in use by SHA, falling back to EVAL on NOSCRIPT.
func (sc *script) Run(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	return sc.current().Run(ctx, c, keys, args...)
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
