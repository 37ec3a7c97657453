package delaystore

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxNames is the most names one shard interns (intern.lua answers 0 beyond it: the name
// is stored whole). It bounds {P:s}:nm, and what a table load reads, for producers with a
// target per request (reply subjects).
const maxNames = 1024

// maxRefused bounds the names a nameBook remembers per shard as refused (the shard's table was
// full): beyond it the list starts over, so such a name is asked for again, at most once
// per maxRefused new names.
const maxRefused = 4096

// codeMark is the first byte of a target or source field that holds a code (the byte 0,
// then the code as a uvarint) rather than the name: no name begins with it (targets
// begin with their broker, sources with a subject or topic).
const codeMark = 0

// genField is the field of {P:s}:nm that holds the table's generation: random hex that
// intern.lua replaces every time it gives a code, so two reads of the field that agree
// saw the same table (docs/design.md "Interned names").
const genField = "@"

// genUnknown is the generation of a table this replica holds without knowing which state
// of Redis' table it is (never an '@' value): a read never decodes with it.
const genUnknown = "?"

// errNamesMoved is a read whose shard's names changed between the read and the load of
// the table: the caller reads again.
var errNamesMoved = errors.New("the shard's names changed while reading")

// nameTable is one shard's interned names as of one state of {P:s}:nm: the generation
// (its '@' field, "" when it has none: no code given) and its codes both ways. A
// table is never changed once made: readers decode with the table whose generation the
// read saw, so a code is only ever decoded into the name it stood for in the dataset the
// entry was read from (docs/design.md "Interned names").
type nameTable struct {
	gen   string
	codes map[string]nameCode // name -> its code
	names map[uint64]string   // code -> name
}

// nameCode is a name's code in one shard and its field form (codeField).
type nameCode struct {
	code uint64
	form string
}

// emptyTable is a table of unknown generation with no codes.
func emptyTable() *nameTable {
	return &nameTable{gen: genUnknown, codes: map[string]nameCode{}, names: map[uint64]string{}}
}

// with returns a copy of t with generation gen and the codes given (names[i] -> codes[i];
// 0: none, left out).
func (t *nameTable) with(gen string, names []string, codes []int64) *nameTable {
	out := &nameTable{gen: gen, codes: make(map[string]nameCode, len(t.codes)+len(names)),
		names: make(map[uint64]string, len(t.names)+len(names))}
	for n, c := range t.codes {
		out.codes[n] = c
	}
	for c, n := range t.names {
		out.names[c] = n
	}
	for i, n := range names {
		if c := codes[i]; c > 0 {
			out.add(n, uint64(c))
		}
	}
	return out
}

func (t *nameTable) add(name string, code uint64) {
	t.codes[name] = nameCode{code: code, form: codeField(code)}
	t.names[code] = name
}

// resolve returns the name of a field that holds a code (codeMark first), the field
// itself otherwise; ErrCorrupt for a malformed code or one the table does not hold.
func (t *nameTable) resolve(f []byte) (string, error) {
	if len(f) == 0 || f[0] != codeMark {
		return string(f), nil
	}
	code, n := binary.Uvarint(f[1:])
	if n <= 0 || n+1 != len(f) || (n > 1 && f[n] == 0) {
		return "", fmt.Errorf("%w: bad name code %q", ErrCorrupt, f)
	}
	return t.nameOfCode(code)
}

// nameOfCode returns the name of code: ErrCorrupt when the table does not hold it (the
// shard's names were lost: deleted by hand) or t is nil.
func (t *nameTable) nameOfCode(code uint64) (string, error) {
	if t != nil {
		if name, ok := t.names[code]; ok {
			return name, nil
		}
	}
	return "", fmt.Errorf("%w: name code %d not in the shard's names", ErrCorrupt, code)
}

// parseTable reads the fields of {P:s}:nm of shard sh (HGETALL: '=<name>' -> code,
// '<code>' -> name, '#', '@') into a table; a code of another shard or an empty name is
// left out (it is then corrupt to every reader).
func parseTable(all map[string]string, sh, shards int) *nameTable {
	t := &nameTable{gen: all[genField], codes: map[string]nameCode{}, names: map[uint64]string{}}
	for f, name := range all {
		if f == "" || f[0] < '1' || f[0] > '9' {
			continue // '=<name>', '#', '@'
		}
		code, err := strconv.ParseUint(f, 10, 64)
		if err == nil && code%uint64(shards) == uint64(sh) && name != "" && name[0] != codeMark {
			t.add(name, code)
		}
	}
	return t
}

// pairsOf reads a flat HGETALL reply (field, value, ...) into a map.
func pairsOf(all []any) map[string]string {
	out := make(map[string]string, len(all)/2)
	for i := 0; i+1 < len(all); i += 2 {
		f, _ := all[i].(string)
		v, _ := all[i+1].(string)
		out[f] = v
	}
	return out
}

// nameBook is what this replica knows of the store's interned names: per shard, the last
// table it saw, and the names the shard refused (its table was full). Safe for concurrent
// use; tables are swapped whole.
type nameBook struct {
	tables  []atomic.Pointer[nameTable]
	mu      sync.Mutex        // serializes the writers of tables and refused
	refused []map[string]bool // per shard: names intern.lua gave no code
}

func newNameBook(shards int) *nameBook {
	b := &nameBook{tables: make([]atomic.Pointer[nameTable], shards), refused: make([]map[string]bool, shards)}
	for i := range b.tables {
		b.tables[i].Store(emptyTable())
		b.refused[i] = map[string]bool{}
	}
	return b
}

// table returns the last table of shard sh this replica saw.
func (b *nameBook) table(sh int) *nameTable { return b.tables[sh].Load() }

// code returns name's code in shard sh (ok false: none known), and whether name is
// settled there: coded, or refused (stored whole without asking again).
func (b *nameBook) code(sh int, name string) (c nameCode, ok, settled bool) {
	if c, ok := b.table(sh).codes[name]; ok {
		return c, true, true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return nameCode{}, false, b.refused[sh][name]
}

// adopt makes t the table of shard sh (a load read it whole).
func (b *nameBook) adopt(sh int, t *nameTable) { b.tables[sh].Store(t) }

// interned records intern.lua's answer for shard sh: codes of names, the table's
// generation gen after the call, and whether the table was at prior's generation before
// it (then prior plus these codes is exactly the table at gen; otherwise the codes are
// right but the rest is not known: generation genUnknown, so the next read loads the
// table).
func (b *nameBook) interned(sh int, prior *nameTable, matched bool, gen string, names []string, codes []int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !matched {
		prior, gen = b.table(sh), genUnknown
	}
	b.tables[sh].Store(prior.with(gen, names, codes))
	for i, n := range names {
		if codes[i] == 0 {
			if len(b.refused[sh]) >= maxRefused {
				clear(b.refused[sh])
			}
			b.refused[sh][n] = true
		}
	}
}

// forget drops what the book knows of shard sh: a park found one of its codes that Redis
// does not hold.
func (b *nameBook) forget(sh int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tables[sh].Store(emptyTable())
	clear(b.refused[sh])
}

// coded is how a body holds its target and source: the target field of a code
// (codeField; "": the name itself) and the source's code (0: the name itself).
type coded struct {
	target string
	source uint64
}

// codeField is the field form of code: codeMark, then code as a uvarint.
func codeField(code uint64) string {
	return string(binary.AppendUvarint([]byte{codeMark}, code))
}

// loadTable reads shard sh's names whole (one HGETALL, at most 2 x maxNames + 2 fields)
// and makes them the book's table of the shard. It blocks until Redis answered or ctx is
// done.
func (s *Store) loadTable(ctx context.Context, sh int) (*nameTable, error) {
	all, err := s.rdb.HGetAll(ctx, s.keys[sh].nm).Result()
	if err != nil {
		return nil, fmt.Errorf("load the names of shard %d: %w", sh, err)
	}
	t := parseTable(all, sh, s.shards)
	s.names.adopt(sh, t)
	return t, nil
}

// tableAt returns shard sh's table of generation gen (what a read of the shard saw,
// atomically with its entries): the book's when it has that generation, else the table
// loaded now when Redis still has it; errNamesMoved when the names changed since the read
// (the caller reads again). It blocks only to load.
func (s *Store) tableAt(ctx context.Context, sh int, gen string) (*nameTable, error) {
	if t := s.names.table(sh); t.gen == gen {
		return t, nil
	}
	t, err := s.loadTable(ctx, sh)
	if err != nil {
		return nil, err
	}
	if t.gen != gen {
		return nil, fmt.Errorf("shard %d: %w", sh, errNamesMoved)
	}
	return t, nil
}

// readNamed runs read, which reads shard sh and returns the generation of its names that
// the read saw atomically with what it read, then decode with the table of that
// generation; when the names changed in between it reads again, at most three times. It
// blocks until Redis answered or ctx is done.
func (s *Store) readNamed(ctx context.Context, sh int, read func() (string, error), decode func(*nameTable) error) error {
	var err error
	for range 3 {
		var gen string
		if gen, err = read(); err != nil {
			return err
		}
		var t *nameTable
		if t, err = s.tableAt(ctx, sh, gen); err == nil {
			return decode(t)
		}
		if !errors.Is(err, errNamesMoved) {
			return err
		}
	}
	return err
}

// genOf reads the generation field of a names hash from an HGET reply ("" when none).
func genOf(c *redis.StringCmd) (string, error) {
	g, err := c.Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return g, err
}

// newGen returns a fresh random generation (16 hex digits).
func newGen() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
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
	priors := make([]*nameTable, 0, len(want))
	gens := make([]string, 0, len(want))
	calls := make([]call, 0, len(want))
	for sh, names := range want {
		prior, gen := s.names.table(sh), newGen()
		args := make([]any, 0, 5+len(names))
		args = append(args, maxNames, s.shards, sh, prior.gen, gen)
		for _, n := range names {
			args = append(args, n)
		}
		shards, priors, gens = append(shards, sh), append(priors, prior), append(gens, gen)
		calls = append(calls, call{keys: []string{s.keys[sh].nm, s.keys[sh].z}, args: args})
	}
	cmds := s.evalPipelined(ctx, s.scripts[scriptIntern], calls)
	var errs map[int]error
	for i, cmd := range cmds {
		sh := shards[i]
		res, err := cmd.Int64Slice()
		if err == nil && len(res) != len(want[sh])+1 {
			err = fmt.Errorf("%d codes for %d names", len(res)-1, len(want[sh]))
		}
		if err == nil {
			err = checkCodes(res[1:], s.shards, sh)
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
		gen := priors[i].gen // the call gave no code: the table is as it was
		if res[0]&2 != 0 {
			gen = gens[i]
		}
		s.names.interned(sh, priors[i], res[0]&1 == 1, gen, want[sh], res[1:])
	}
	return errs
}

// checkCodes checks intern.lua's codes for shard sh: each 0 or a code of the shard.
func checkCodes(codes []int64, shards, sh int) error {
	for _, c := range codes {
		if c < 0 || (c > 0 && c%int64(shards) != int64(sh)) {
			return fmt.Errorf("code %d is not one of shard %d", c, sh)
		}
	}
	return nil
}

// nameOf returns the name a target field form f of shard sh stands for (a field of
// {P:s}:n or {P:s}:qt: a name, or a code), with the shard's table as Redis holds it now.
// It blocks until Redis answered or ctx is done.
func (s *Store) nameOf(ctx context.Context, sh int, f string) (string, error) {
	if len(f) == 0 || f[0] != codeMark {
		return f, nil
	}
	var name string
	err := s.readNamed(ctx, sh, func() (string, error) {
		return genOf(s.rdb.HGet(ctx, s.keys[sh].nm, genField))
	}, func(t *nameTable) error {
		var err error
		name, err = t.resolve([]byte(f))
		return err
	})
	return name, err
}

// targetKey is name as the scripts read the target of shard sh's bodies (targetOf): its
// code's field when the shard has one this replica knows, else the name. A body parked
// whole before its name got a code is then not matched by it (bulk's lineage check
// passes over such an entry parked during the pass).
func (s *Store) targetKey(sh int, name string) string {
	if c, ok, _ := s.names.code(sh, name); ok {
		return c.form
	}
	return name
}

// internNew interns the targets and sources of reqs (byShard: shard -> their indexes)
// that their shard has no settled code for, in one round trip, and returns the error of
// each shard whose call failed. Settled names cost no allocation and no I/O. A failed
// shard's names stay unsettled and Park parks none of its messages (a Redis that refuses
// the call would refuse the park too), rather than park them whole into a shard that may
// have no '#' yet (intern.lua would then give that shard no code until it is empty); the
// other shards go on.
func (s *Store) internNew(ctx context.Context, reqs []ParkRequest, byShard map[int][]int) map[int]error {
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
// "http" (which a body holds in its flags), not beginning with codeMark.
func internable(name string) bool {
	return name != "" && name != sourceHTTP && name[0] != codeMark
}

// namesBlock is what one park call writes of one shard's codes: the form each name got
// (decided at its first use, so that the quota block and the bodies agree), and the
// (code, name) pairs park.lua checks (docs/design.md "Interned names").
type namesBlock struct {
	book  *nameBook
	sh    int
	names []string   // names used, in first-use order
	codes []nameCode // their codes (zero: whole)
	pairs []any      // code, name of the coded ones
}

// newNamesBlock returns shard sh's block for one park call.
func (s *Store) newNamesBlock(sh int) *namesBlock {
	return &namesBlock{book: s.names, sh: sh}
}

// coded returns how e's body holds its target and source.
func (n *namesBlock) coded(e Envelope) coded {
	return coded{target: n.code(e.Target).form, source: n.code(e.Source).code}
}

// code returns the code of name in this block's bodies (zero: it is written whole),
// decided at its first use.
func (n *namesBlock) code(name string) nameCode {
	if !internable(name) {
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
	out := make([]any, 0, len(n.pairs)+1)
	return append(append(out, n.pairs...), strconv.Itoa(len(n.pairs)/2))
}
