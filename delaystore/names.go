package delaystore

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"
)

// maxNames is the most names one shard interns (intern.lua answers 0 beyond it: the name
// is stored whole). It bounds {P:s}:nm, and what a table load reads, for producers with a
// target per request (reply subjects).
const maxNames = 1024

// maxRefused bounds the names a nameBook remembers per shard as refused (the shard's table was
// full): beyond it the list starts over, so such a name is asked for again, at most once
// per maxRefused new names.
const maxRefused = 4096

// errUnknownName is a body's code that the nameBook does not hold (yet): the caller
// loads the shard's names (Store.loadNames) and decodes again.
var errUnknownName = errors.New("unknown name code")

// codeMark is the first byte of a target or source field that holds a code (the byte 0,
// then the code as a uvarint) rather than the name: no name begins with it (targets
// begin with their broker, sources with a subject or topic).
const codeMark = 0

// nameBook is what this replica knows of the store's interned names (docs/design.md,
// "Interned names"): per shard, name -> the field form of its code there, and the names
// of all codes. A code is given by one shard (code mod shards = the shard: intern.lua),
// so codes of different shards never collide and one map decodes them all. Codes never
// change while their shard's key lives, so an entry never goes stale; forget drops a
// shard's after a park found a code Redis does not hold. Safe for concurrent use.
type nameBook struct {
	mu      sync.RWMutex
	shards  int
	codes   []map[string]nameCode // per shard: name -> its code there
	names   map[uint64]string     // code -> name
	refused []map[string]bool     // per shard: names intern.lua gave no code (the shard's table was full)
}

// nameCode is a name's code in one shard and its field form (codeField).
type nameCode struct {
	code uint64
	form string
}

func newNameBook(shards int) *nameBook {
	b := &nameBook{shards: shards, codes: make([]map[string]nameCode, shards), names: map[uint64]string{},
		refused: make([]map[string]bool, shards)}
	for i := range b.codes {
		b.codes[i], b.refused[i] = map[string]nameCode{}, map[string]bool{}
	}
	return b
}

// coded is how a body of a store with interned names holds its target and source: the
// target field of a code (codeField; "": the name itself) and the source's code (0: the
// name itself).
type coded struct {
	target string
	source uint64
}

// codeField is the field form of code: codeMark, then code as a uvarint.
func codeField(code uint64) string {
	return string(binary.AppendUvarint([]byte{codeMark}, code))
}

// code returns name's code in shard sh (ok false: none known), and whether name is
// settled there: coded, or refused (stored whole without asking again).
func (b *nameBook) code(sh int, name string) (c nameCode, ok, settled bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if c, ok := b.codes[sh][name]; ok {
		return c, true, true
	}
	return nameCode{}, false, b.refused[sh][name]
}

// name returns the name of code.
func (b *nameBook) name(code uint64) (string, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	n, ok := b.names[code]
	return n, ok
}

// learn records that name has code in shard sh (0: refused, stored whole).
func (b *nameBook) learn(sh int, name string, code uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if code == 0 {
		if len(b.refused[sh]) >= maxRefused {
			clear(b.refused[sh])
		}
		b.refused[sh][name] = true
		return
	}
	b.codes[sh][name] = nameCode{code: code, form: codeField(code)}
	b.names[code] = name
}

// forget drops what the book knows of shard sh: a park found one of its codes that Redis
// does not hold.
func (b *nameBook) forget(sh int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	clear(b.codes[sh])
	clear(b.refused[sh])
	for c := range b.names {
		if c%uint64(b.shards) == uint64(sh) {
			delete(b.names, c)
		}
	}
}

// resolve returns the name of a field that holds a code (codeMark first), the field
// itself otherwise (nameOfCode's errors; ErrCorrupt when the code is malformed).
func (b *nameBook) resolve(f []byte) (string, error) {
	if len(f) == 0 || f[0] != codeMark {
		return string(f), nil
	}
	code, n := binary.Uvarint(f[1:])
	if n <= 0 || n+1 != len(f) || (n > 1 && f[n] == 0) {
		return "", fmt.Errorf("%w: bad name code %q", ErrCorrupt, f)
	}
	return b.nameOfCode(code)
}

// nameOfCode returns the name of code: an error wrapping errUnknownName when the book
// lacks it, ErrCorrupt for code 0 or a nil book (a store without interned names holds no
// codes).
func (b *nameBook) nameOfCode(code uint64) (string, error) {
	if b == nil || code == 0 {
		return "", fmt.Errorf("%w: name code %d in a store without it", ErrCorrupt, code)
	}
	if name, ok := b.name(code); ok {
		return name, nil
	}
	return "", fmt.Errorf("%w %d", errUnknownName, code)
}

// book returns the store's name book when its entries may hold codes (a store with
// interned names), nil otherwise.
func (s *Store) book() *nameBook {
	if !s.interned.Load() {
		return nil
	}
	return s.names
}

// loadNames reads shard sh's interned names into the book (one HGETALL, at most
// 2 x maxNames + 1 fields). It blocks until Redis answered or ctx is done.
func (s *Store) loadNames(ctx context.Context, sh int) error {
	all, err := s.rdb.HGetAll(ctx, s.keys[sh].nm).Result()
	if err != nil {
		return fmt.Errorf("load the names of shard %d: %w", sh, err)
	}
	for f, name := range all {
		if f == "" || f[0] < '1' || f[0] > '9' {
			continue // '=<name>' and '#'
		}
		code, err := strconv.ParseUint(f, 10, 64)
		if err == nil && code%uint64(s.shards) == uint64(sh) && name != "" && name[0] != codeMark {
			s.names.learn(sh, name, code)
		}
	}
	return nil
}

// intern gives codes to the names of each shard (shard -> names not settled there) that
// the shard has none for yet, one intern.lua call per shard in one pipeline, and records
// the answers in the book. It returns the error of each shard whose call failed; a script
// error (a key of the wrong type) turns packing off for unpackFor, as a packed call's does
// (runList), so that the broken shard's claims do not take the others' with them. It
// blocks until Redis answered or ctx is done.
func (s *Store) intern(ctx context.Context, want map[int][]string) map[int]error {
	if len(want) == 0 {
		return nil
	}
	shards := make([]int, 0, len(want))
	calls := make([]call, 0, len(want))
	for sh, names := range want {
		args := make([]any, 0, 3+len(names))
		args = append(args, maxNames, s.shards, sh)
		for _, n := range names {
			args = append(args, n)
		}
		shards = append(shards, sh)
		calls = append(calls, call{keys: []string{s.keys[sh].nm, s.keys[sh].z}, args: args})
	}
	cmds := s.evalPipelined(ctx, s.scripts[scriptIntern], calls)
	var errs map[int]error
	for i, cmd := range cmds {
		sh := shards[i]
		codes, err := cmd.Int64Slice()
		if err == nil && len(codes) != len(want[sh]) {
			err = fmt.Errorf("%d codes for %d names", len(codes), len(want[sh]))
		}
		if err != nil {
			if errs == nil {
				errs = map[int]error{}
			}
			errs[sh] = fmt.Errorf("intern names: %w", err)
			if groupsFailed(err) { // the shard's keys refuse a script: keep its groups apart, as runList does
				s.unpackUntil.Store(time.Now().Add(unpackFor).UnixNano())
			}
			continue
		}
		for j, name := range want[sh] {
			if c := codes[j]; c == 0 || c%int64(s.shards) == int64(sh) {
				s.names.learn(sh, name, uint64(max(c, 0)))
			}
		}
	}
	return errs
}

// decodeIn decodes the stored envelope raw of message id of shard sh (decodeStored),
// loading the shard's names once when it holds a code the book lacks: ErrCorrupt when
// Redis lacks it too, errUnknownName wrapping the load's error when the load failed. It
// blocks only to load, until Redis answered or ctx is done.
func (s *Store) decodeIn(ctx context.Context, sh int, raw, id string) (stored, Envelope, error) {
	b := s.book()
	st, env, err := decodeStored(raw, id, b)
	if b == nil || !errors.Is(err, errUnknownName) {
		return st, env, err
	}
	if err := s.loadNames(ctx, sh); err != nil {
		return st, Envelope{}, fmt.Errorf("%w: %w", errUnknownName, err)
	}
	st, env, err = decodeStored(raw, id, b)
	if errors.Is(err, errUnknownName) {
		err = fmt.Errorf("%w: %v", ErrCorrupt, err) // Redis lacks it too
	}
	return st, env, err
}

// nameOf returns the name a target field form f stands for (a field of {P:s}:n or
// {P:s}:qt: a name, or a code of a store with interned names), loading the names of the
// code's shard once when the book lacks it. It blocks only to load.
func (s *Store) nameOf(ctx context.Context, f string) (string, error) {
	b := s.book()
	n, err := b.resolve([]byte(f))
	if !errors.Is(err, errUnknownName) || b == nil {
		return n, err
	}
	code, _ := binary.Uvarint([]byte(f[1:])) // resolve checked it
	if err := s.loadNames(ctx, int(code%uint64(s.shards))); err != nil {
		return "", err
	}
	return b.resolve([]byte(f))
}

// knowNames loads shard sh's names once when a body head of the scan.lua answer out
// holds a code the book lacks, so that decoding the answer finds them all. It blocks only
// to load.
func (s *Store) knowNames(ctx context.Context, sh int, out []any) error {
	b := s.book()
	if b == nil {
		return nil
	}
	for i := 3; i+5 < len(out); i += 6 {
		id, _ := out[i].(string)
		head, _ := out[i+3].(string)
		if _, _, err := decodeHead([]byte(head), id, b); errors.Is(err, errUnknownName) {
			return s.loadNames(ctx, sh)
		}
	}
	return nil
}

// targetKey is name as the scripts read the target of shard sh's bodies (targetOf): its
// code's field when the shard has one this replica knows, else the name. A body parked
// whole before its name got a code is then not matched by it (bulk's lineage check
// passes over such an entry parked during the pass).
func (s *Store) targetKey(sh int, name string) string {
	if b := s.book(); b != nil {
		if c, ok, _ := b.code(sh, name); ok {
			return c.form
		}
	}
	return name
}

// targetField returns the target field of a body head as stored (a name, or a code's
// field): what targetOf reads.
func targetField(head string) string {
	if head == "" {
		return ""
	}
	d := decoder{b: []byte(head[1:])}
	if head[0] == formatSource || head[0] == formatCompactSource {
		d.bytes("source id")
	}
	if head[0] >= formatCompactNoSource {
		d.byte("flags")
	}
	return string(d.bytes("target"))
}

// internNew interns, in a store with interned names, the targets and sources of reqs
// (byShard: shard -> their indexes) that their shard has no settled code for, in one
// round trip, and returns the error of each shard whose call failed. Settled names cost no
// allocation and no I/O. A failed shard's names stay unsettled and Park parks none of its
// messages (a Redis that refuses the call would refuse the park too), rather than park
// them whole into a shard that may have no '#' yet (intern.lua would then give that shard
// no code until it is empty); the other shards go on.
func (s *Store) internNew(ctx context.Context, reqs []ParkRequest, byShard map[int][]int) map[int]error {
	if s.book() == nil {
		return nil
	}
	var want map[int][]string
	add := func(sh int, name string) {
		if !internable(name) {
			return
		}
		if _, _, settled := s.names.code(sh, name); settled || slices.Contains(want[sh], name) {
			return
		}
		if want == nil {
			want = map[int][]string{}
		}
		want[sh] = append(want[sh], name)
	}
	for sh, idx := range byShard {
		for _, i := range idx {
			add(sh, reqs[i].Envelope.Target)
			add(sh, reqs[i].Envelope.Source)
		}
	}
	return s.intern(ctx, want)
}

// internable reports whether name may get a code: a target or a source other than
// "http" (which a compact body holds in its flags), not beginning with codeMark.
func internable(name string) bool {
	return name != "" && name != sourceHTTP && name[0] != codeMark
}

// namesBlock is what one park call writes of one shard's codes: the form each name got
// (decided at its first use, so that the quota block and the bodies agree), and the
// (code, name) pairs park.lua checks (docs/design.md "Interned names"). A nil block (a
// store without interned names) codes nothing.
type namesBlock struct {
	book  *nameBook
	sh    int
	names []string   // names used, in first-use order
	codes []nameCode // their codes (zero: whole)
	pairs []any      // code, name of the coded ones
}

// newNamesBlock returns shard sh's block for one park call; nil without interned names.
func (s *Store) newNamesBlock(sh int) *namesBlock {
	b := s.book()
	if b == nil {
		return nil
	}
	return &namesBlock{book: b, sh: sh}
}

// coded returns how e's body holds its target and source.
func (n *namesBlock) coded(e Envelope) coded {
	if n == nil {
		return coded{}
	}
	return coded{target: n.code(e.Target).form, source: n.code(e.Source).code}
}

// code returns the code of name in this block's bodies (zero: it is written whole),
// decided at its first use.
func (n *namesBlock) code(name string) nameCode {
	if n == nil || !internable(name) {
		return nameCode{}
	}
	if k := slices.Index(n.names, name); k >= 0 {
		return n.codes[k]
	}
	nc, ok, _ := n.book.code(n.sh, name)
	n.names = append(n.names, name)
	n.codes = append(n.codes, nc)
	if ok {
		n.pairs = append(n.pairs, strconv.FormatUint(nc.code, 10), name)
	}
	return nc
}

// key returns name as park.lua's targetOf reads it from this block's bodies: its code's
// field, or the name.
func (n *namesBlock) key(name string) string {
	return cmp.Or(n.code(name).form, name)
}

// args is the names block of park's ARGV: the pairs, then their count.
func (n *namesBlock) args() []any {
	if n == nil {
		return []any{"0"}
	}
	out := make([]any, 0, len(n.pairs)+1)
	return append(append(out, n.pairs...), strconv.Itoa(len(n.pairs)/2))
}
