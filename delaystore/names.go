package delaystore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

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
