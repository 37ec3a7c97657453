package delaystore

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// Body formats: the first byte of every encoded body. They differ only in where the source
// id is: none (formatNoSource), the message id itself (formatSourceIsID: a message without
// x-delay-id, the common case, pays no byte for it), or a uvarint-length-prefixed field
// after the format byte (formatSource). The Lua scripts read it (sourceOf and targetOf in
// envelope.lua).
const (
	formatNoSource   = 1
	formatSourceIsID = 2
	formatSource     = 3
)

// Flags of a body, the byte after the format byte (and source id):
// bit 0 (flagBound) whether the bound field of a debounced message follows the source,
// bit 1 reserved (0; the target field is always the whole target, as the scripts read it:
// cutting its prefix cost Lua a concatenation per read, about 0.3 us of Redis CPU per
// message, for 5 bytes that cross no size class), bits 2-3 the source's broker prefix that
// is left out of the source field (flagNATS: "nats:", flagKafka: "kafka:", 0: none, the
// field is the whole source; 3, flagSourceHTTP: the source is "http" and has no field),
// then whether a key, a header list and a hops count follow, and (bit 7, flagSourceCode)
// whether the source is a code: a bare uvarint in place of the source field, broker bits 0
// (names.go).
const (
	flagNATS       = 1
	flagKafka      = 2
	flagBound      = 1
	flagReserved   = 2
	flagSourceHTTP = 3 << 2
	flagKey        = 1 << 4
	flagHeaders    = 1 << 5
	flagHops       = 1 << 6
	flagSourceCode = 1 << 7
)

// brokerPrefixes are the source prefixes a body leaves out, by their flag value.
var brokerPrefixes = [3]string{"", "nats:", "kafka:"}

// sourceHTTP is the one source without a broker name (the message API, core requests).
const sourceHTTP = "http"

// Envelope fields stored as the last headers of the body, in this order, each only when
// set: metaSent, the source time of a message parked with Replace (ParkRequest.Published,
// decimal ms: cancel.lua reads it, so that a cancel does not delete a message its source
// published after the cancel; the decoder drops it), metaNulls (the indices in
// Envelope.Headers of the headers with Header.Null, a Kafka header's null value, in
// ascending canonical decimal joined by ","; such a header's value is stored empty: a
// message without one pays nothing), metaWindow (Envelope.Window, decimal
// ms > 0, and for a recurring message ",<Envelope.Anchor>"), metaTombstone ("1":
// Envelope.Tombstone), metaOrdering (Envelope.OrderingKey), metaMisfire (Envelope.Misfire), metaExpires (Envelope.Expires,
// decimal ms > 0) and metaEvery (Envelope.Every, last: bulk.lua's recurring looks for it
// there). They are reserved headers, which no adapter ever sends to a broker.
const (
	metaSent      = headers.ReservedPrefix + "sent"
	metaNulls     = headers.ReservedPrefix + "nulls"
	metaWindow    = headers.ReservedPrefix + "window"
	metaTombstone = headers.ReservedPrefix + "tombstone"
	metaOrdering  = headers.ReservedPrefix + "okey"
	metaMisfire   = headers.ReservedPrefix + "misfire"
	metaExpires   = headers.ReservedPrefix + "expires"
	metaEvery     = headers.ReservedPrefix + "every"
)

// metaHeaders are the Envelope fields stored as trailing reserved headers, in their
// canonical order, with sent (ms, 0: none) first.
func (e Envelope) metaHeaders(sent int64) headers.List {
	var l headers.List
	if sent > 0 {
		l = append(l, headers.Header{Key: metaSent, Value: strconv.FormatInt(sent, 10)})
	}
	if v := nullIndices(e.Headers); v != "" {
		l = append(l, headers.Header{Key: metaNulls, Value: v})
	}
	if e.Window > 0 {
		v := strconv.FormatInt(e.Window.Milliseconds(), 10)
		if e.Anchor > 0 {
			v += "," + strconv.FormatInt(e.Anchor, 10)
		}
		l = append(l, headers.Header{Key: metaWindow, Value: v})
	}
	if e.Tombstone {
		l = append(l, headers.Header{Key: metaTombstone, Value: "1"})
	}
	if e.OrderingKey != "" {
		l = append(l, headers.Header{Key: metaOrdering, Value: e.OrderingKey})
	}
	if e.Misfire != "" {
		l = append(l, headers.Header{Key: metaMisfire, Value: e.Misfire})
	}
	if e.Expires > 0 {
		l = append(l, headers.Header{Key: metaExpires, Value: strconv.FormatInt(e.Expires.Milliseconds(), 10)})
	}
	if e.Every != "" {
		l = append(l, headers.Header{Key: metaEvery, Value: e.Every})
	}
	return l
}

// checkOrderingKey checks e's ordering key: none, or 1 to contract.MaxOrderingKey bytes on a message
// that does not recur.
func checkOrderingKey(e Envelope) error {
	switch {
	case e.OrderingKey == "":
		return nil
	case len(e.OrderingKey) > contract.MaxOrderingKey:
		return fmt.Errorf("ordering key of %d bytes (at most %d)", len(e.OrderingKey), contract.MaxOrderingKey)
	case e.Every != "":
		return errors.New("an ordering key on a recurring message")
	}
	return nil
}

// nullIndices is the metaNulls value of hs: the indices of its Header.Null fields, "" when
// none (nothing allocated).
func nullIndices(hs headers.List) string {
	var b []byte
	for i, h := range hs {
		if h.Null {
			if b != nil {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(i), 10)
		}
	}
	return string(b)
}

// takeMeta moves the trailing reserved headers of a decoded body into their Envelope
// fields (metaEvery last, then metaExpires, then metaMisfire, then metaOrdering, then metaTombstone, then
// metaWindow, then metaNulls, marking the headers it names Null; metaSent, first, is
// dropped). A value that encodeBody would not have written is ErrCorrupt.
func (e *Envelope) takeMeta() error {
	if n := len(e.Headers); n > 0 && e.Headers[n-1].Key == metaEvery {
		if e.Every = e.Headers[n-1].Value; e.Every == "" {
			return fmt.Errorf("%w: empty schedule", ErrCorrupt)
		}
		e.Headers = e.Headers[:n-1]
	}
	if n := len(e.Headers); n > 0 && e.Headers[n-1].Key == metaExpires {
		v := e.Headers[n-1].Value
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms <= 0 || ms > math.MaxInt64/int64(time.Millisecond) || strconv.FormatInt(ms, 10) != v {
			return fmt.Errorf("%w: expires %q", ErrCorrupt, v)
		}
		e.Expires = time.Duration(ms) * time.Millisecond
		e.Headers = e.Headers[:n-1]
	}
	if n := len(e.Headers); n > 0 && e.Headers[n-1].Key == metaMisfire {
		if e.Misfire = e.Headers[n-1].Value; e.Misfire == "" {
			return fmt.Errorf("%w: empty misfire policy", ErrCorrupt)
		}
		e.Headers = e.Headers[:n-1]
	}
	if n := len(e.Headers); n > 0 && e.Headers[n-1].Key == metaOrdering {
		e.OrderingKey = e.Headers[n-1].Value
		if err := checkOrderingKey(*e); err != nil {
			return fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		e.Headers = e.Headers[:n-1]
	}
	if n := len(e.Headers); n > 0 && e.Headers[n-1].Key == metaTombstone {
		if e.Headers[n-1].Value != "1" {
			return fmt.Errorf("%w: tombstone flag %q", ErrCorrupt, e.Headers[n-1].Value)
		}
		e.Tombstone = true
		e.Headers = e.Headers[:n-1]
	}
	if n := len(e.Headers); n > 0 && e.Headers[n-1].Key == metaWindow {
		if err := e.takeWindow(e.Headers[n-1].Value); err != nil {
			return err
		}
		e.Headers = e.Headers[:n-1]
	}
	nulls := ""
	if n := len(e.Headers); n > 0 && e.Headers[n-1].Key == metaNulls {
		if nulls = e.Headers[n-1].Value; nulls == "" {
			return fmt.Errorf("%w: empty null header list", ErrCorrupt)
		}
		e.Headers = e.Headers[:n-1]
	}
	if n := len(e.Headers); n > 0 && e.Headers[n-1].Key == metaSent {
		v := e.Headers[n-1].Value
		if ms, err := strconv.ParseInt(v, 10, 64); err != nil || ms <= 0 || strconv.FormatInt(ms, 10) != v {
			return fmt.Errorf("%w: sent %q", ErrCorrupt, v)
		}
		e.Headers = e.Headers[:n-1]
	}
	if nulls != "" {
		if err := e.takeNulls(nulls); err != nil {
			return err
		}
	}
	if len(e.Headers) == 0 {
		e.Headers = nil
	}
	return nil
}

// takeNulls marks Null the headers a metaNulls value v names: canonical decimal indices,
// ascending, each of a header with an empty value.
func (e *Envelope) takeNulls(v string) error {
	last := -1
	for f := range strings.SplitSeq(v, ",") {
		i, err := strconv.Atoi(f)
		if err != nil || i <= last || i >= len(e.Headers) || strconv.Itoa(i) != f || e.Headers[i].Value != "" {
			return fmt.Errorf("%w: null headers %q", ErrCorrupt, v)
		}
		e.Headers[i].Null = true
		last = i
	}
	return nil
}

// takeWindow reads a metaWindow value: "<window ms>" or "<window ms>,<anchor ms>", each
// canonical decimal > 0, the window at most an hour.
func (e *Envelope) takeWindow(v string) error {
	w, anchor, hasAnchor := strings.Cut(v, ",")
	ms, ok := canonicalMS(w)
	if !ok || ms > time.Hour.Milliseconds() {
		return fmt.Errorf("%w: window %q", ErrCorrupt, v)
	}
	e.Window = time.Duration(ms) * time.Millisecond
	if hasAnchor {
		if e.Anchor, ok = canonicalMS(anchor); !ok {
			return fmt.Errorf("%w: window %q", ErrCorrupt, v)
		}
	}
	return nil
}

// canonicalMS reads a decimal > 0 without sign or leading zeros.
func canonicalMS(v string) (int64, bool) {
	ms, err := strconv.ParseInt(v, 10, 64)
	return ms, err == nil && ms > 0 && strconv.FormatInt(ms, 10) == v
}

// encodeBodySent encodes the Go-owned part of a stored envelope of message id, with the
// source time sent (unix ms, 0: none) stored as the first trailing reserved header
// (metaSent): the format byte (by e.SourceID: empty, equal to id, other), with
// formatSource the uvarint-length-prefixed source id, the flags byte, the target (whole) and (unless it is "http") the source (without its
// broker prefix) as uvarint-length-prefixed fields, then as the flags say the bound field
// (flagBound, when e.MaxWait is at least 1 ms: uvarint max wait ms > 0, uvarint e.DueBy, which
// park.lua fixes; envelope.lua's boundOf and withBound read and rewrite it), the
// key (uvarint length + bytes), the header list (uvarint count >= 1 + (key, value) pairs:
// e.Headers, a Null one's value empty, then e.metaHeaders) and the hops count, and the
// payload up to the end. The
// hops count is e.Headers' last header when that is x-delay-hops with a canonical decimal
// value (ingress always adds it last): about 14 bytes less per message; decodeBody puts
// it back there. A non-empty c.target is written as the target field instead of the name,
// and a c.source > 0 as the source (flagSourceCode): codes (names.go).
func encodeBodySent(e Envelope, id string, sent int64, c coded) []byte {
	meta := e.metaHeaders(sent)
	hs, hops, hasHops := splitHops(e.Headers)
	n := 2 + 7*binary.MaxVarintLen64 + len(e.SourceID) + len(e.Target) + len(e.Source) +
		len(e.Key) + len(e.Payload) + pairsLen(hs) + pairsLen(meta)
	b := make([]byte, 0, n)
	b = appendFormat(b, e.SourceID, id)
	sFlag, source := cutBroker(e.Source)
	flags := sFlag << 2
	switch {
	case e.Source == sourceHTTP:
		flags = flagSourceHTTP
	case c.source > 0:
		flags = flagSourceCode
	}
	if e.Key != nil {
		flags |= flagKey
	}
	if len(hs)+len(meta) > 0 {
		flags |= flagHeaders
	}
	if hasHops {
		flags |= flagHops
	}
	if e.bounded() {
		flags |= flagBound
	}
	b = append(b, flags)
	b = appendString(b, cmp.Or(c.target, e.Target))
	switch {
	case flags&flagSourceCode != 0:
		b = binary.AppendUvarint(b, c.source)
	case flags&flagSourceHTTP != flagSourceHTTP:
		b = appendString(b, source)
	}
	if e.bounded() {
		b = binary.AppendUvarint(b, uint64(e.MaxWait.Milliseconds()))
		b = binary.AppendUvarint(b, uint64(max(e.DueBy, 0)))
	}
	if e.Key != nil {
		b = binary.AppendUvarint(b, uint64(len(e.Key)))
		b = append(b, e.Key...)
	}
	if flags&flagHeaders != 0 {
		b = binary.AppendUvarint(b, uint64(len(hs)+len(meta)))
		for _, l := range []headers.List{hs, meta} {
			for _, h := range l {
				b = appendString(b, h.Key)
				if h.Null {
					b = appendString(b, "")
				} else {
					b = appendString(b, h.Value)
				}
			}
		}
	}
	if hasHops {
		b = binary.AppendUvarint(b, hops)
	}
	return append(b, e.Payload...)
}

// bounded reports whether e is stored with a bound field: a max wait of at least 1 ms.
func (e Envelope) bounded() bool { return e.MaxWait >= time.Millisecond }

// cutBroker splits a target or source into its broker prefix's flag (flagNATS, flagKafka,
// 0: none) and the rest.
func cutBroker(s string) (byte, string) {
	for f := flagNATS; f <= flagKafka; f++ {
		if rest, ok := strings.CutPrefix(s, brokerPrefixes[f]); ok {
			return byte(f), rest
		}
	}
	return 0, s
}

// splitHops returns hs without its last header and that header's count when it is
// x-delay-hops with a canonical decimal value, else hs as is.
func splitHops(hs headers.List) (headers.List, uint64, bool) {
	n := len(hs)
	if n == 0 || hs[n-1].Key != contract.HeaderHops {
		return hs, 0, false
	}
	v, err := strconv.ParseUint(hs[n-1].Value, 10, 64)
	if err != nil || strconv.FormatUint(v, 10) != hs[n-1].Value {
		return hs, 0, false
	}
	return hs[:n-1], v, true
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decodeBodyIn decodes the body of message id (encodeBodySent), resolving the codes of
// target and source through names (the shard's table as of the read: names.go; nil: none,
// a code is then corrupt). It never panics: malformed input, and input encodeBodySent
// would not write (a formatSource source id that is empty or id, unused flag bits, an
// empty header list, a source field that keeps a prefix the flags would have cut), yield
// an error wrapping ErrCorrupt. The returned Key and Payload alias b.
func decodeBodyIn(b []byte, id string, names *nameTable) (Envelope, error) {
	return decodeBodyAs(b, id, names, false)
}

// decodeBodyAs is decodeBodyIn; with salvage (salvageStored), a target or source whose
// code names does not resolve is left "" instead of failing the body: everything else is
// decoded as strictly.
func decodeBodyAs(b []byte, id string, names *nameTable, salvage bool) (Envelope, error) {
	var e Envelope
	if len(b) == 0 {
		return e, fmt.Errorf("%w: empty body", ErrCorrupt)
	}
	d := decoder{b: b[1:], names: names, salvage: salvage}
	switch b[0] {
	case formatNoSource:
	case formatSourceIsID:
		e.SourceID = id
	case formatSource:
		e.SourceID = string(d.bytes("source id"))
		if d.err == nil && (e.SourceID == "" || e.SourceID == id) {
			d.fail("source id written as a field but empty or the message id")
		}
	default:
		return e, fmt.Errorf("%w: unknown body format %d", ErrCorrupt, b[0])
	}
	hops, hasHops := d.rest(&e)
	if d.err == nil {
		d.err = e.takeMeta()
	}
	if d.err == nil {
		if hasHops {
			e.Headers = append(e.Headers, headers.Header{Key: contract.HeaderHops, Value: strconv.FormatUint(hops, 10)})
		} else if _, _, cut := splitHops(e.Headers); cut {
			d.fail("hops count written as a header")
		}
	}
	if d.err != nil {
		return Envelope{}, d.err
	}
	e.Payload = d.b
	return e, nil
}

// rest reads flags, target, source, key, headers and the hops count (and whether there is
// one) of a body, after its format byte and source id.
func (d *decoder) rest(e *Envelope) (uint64, bool) {
	flags := d.head(e)
	if flags&flagKey != 0 {
		e.Key = d.bytes("key")
	}
	if flags&flagHeaders != 0 {
		count := d.uvarint("header count")
		if d.err == nil && count == 0 {
			d.fail("empty header list")
		}
		e.Headers = d.headers(count)
	}
	if flags&flagHops == 0 {
		return 0, false
	}
	return d.uvarint("hops"), true
}

// head reads the flags, target and source of a body and returns the flags.
func (d *decoder) head(e *Envelope) byte {
	flags := d.byte("flags")
	if d.err == nil && (flags&flagReserved != 0 || (flags&flagSourceCode != 0 && flags&flagSourceHTTP != 0)) {
		d.fail(fmt.Sprintf("flags %#x", flags))
	}
	e.Target = d.name(d.bytes("target"))
	if flags&flagSourceCode != 0 {
		e.Source = d.code(d.uvarint("source code"))
	} else if flags&flagSourceHTTP == flagSourceHTTP {
		e.Source = sourceHTTP
	} else {
		e.Source = d.brokered((flags>>2)&3, "source")
		if d.err == nil && e.Source == sourceHTTP {
			d.fail("source http written as a field")
		}
	}
	if flags&flagBound != 0 {
		d.bound(e)
	}
	return flags
}

// bound reads the bound field of a debounced message (flagBound): its max wait (ms > 0)
// and DueBy (unix ms, 0 before park.lua fixed it), both exact as Lua numbers.
func (d *decoder) bound(e *Envelope) {
	mw := d.uvarint("max wait")
	by := d.uvarint("due by")
	if d.err != nil {
		return
	}
	if mw == 0 || mw > math.MaxInt64/uint64(time.Millisecond) || by >= 1<<53 {
		d.fail(fmt.Sprintf("bound %d, %d", mw, by))
		return
	}
	e.MaxWait, e.DueBy = time.Duration(mw)*time.Millisecond, int64(by)
}

// brokered reads a source field whose broker prefix flag f (brokerPrefixes)
// left out; a field that begins with a prefix a flag would have cut is not canonical.
func (d *decoder) brokered(f byte, what string) string {
	v := string(d.bytes(what))
	if d.err != nil {
		return ""
	}
	if f == 0 {
		if g, _ := cutBroker(v); g != 0 {
			d.fail(what + " keeps its broker prefix")
		}
		return v
	}
	return brokerPrefixes[f] + v
}

// headers reads count (key, value) pairs.
func (d *decoder) headers(count uint64) headers.List {
	// Every header takes at least two bytes: bound the allocation by the input.
	if d.err == nil && count > uint64(len(d.b))/2 {
		d.fail(fmt.Sprintf("header count %d exceeds the body", count))
	}
	if d.err != nil || count == 0 {
		return nil
	}
	l := make(headers.List, 0, count)
	for i := uint64(0); i < count && d.err == nil; i++ {
		k := d.bytes("header key")
		v := d.bytes("header value")
		l = append(l, headers.Header{Key: string(k), Value: string(v)})
	}
	return l
}

type decoder struct {
	b     []byte
	err   error
	names *nameTable // the shard's interned names as of the read (nil: none)
	// salvage: a name that does not resolve reads as "" and is not an error (keep)
	salvage bool
}

// name returns the name a target field f stands for (nameBook.resolve).
func (d *decoder) name(f []byte) string {
	if d.err != nil {
		return ""
	}
	return d.keep(d.names.resolve(f))
}

// code returns the name of code (nameBook.nameOfCode).
func (d *decoder) code(code uint64) string {
	if d.err != nil {
		return ""
	}
	return d.keep(d.names.nameOfCode(code))
}

// keep returns n, recording err as the decoder's error when set (salvaging: "", no error).
func (d *decoder) keep(n string, err error) string {
	if err != nil {
		if d.salvage {
			return ""
		}
		d.err = err
	}
	return n
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrCorrupt, what)
	}
}

func (d *decoder) byte(what string) byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.fail("truncated " + what)
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	// n > 1 with a last byte of zero is an overlong encoding: rejected, so that every body
	// has exactly one encoding.
	if n <= 0 || (n > 1 && d.b[n-1] == 0) {
		d.fail("bad length of " + what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes(what string) []byte {
	n := d.uvarint(what)
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail(fmt.Sprintf("%s of %d bytes exceeds the body", what, n))
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// stored is a stored envelope split into the Lua-owned header and the Go-owned body.
type stored struct {
	version  int64
	attempts int
	due      int64
	body     string
	// headerLen is the length of the header: the body starts there.
	headerLen int
}

// headerBinary is the first byte of a stored envelope, whose header is headerLenBinary
// bytes: headerBinary, then version (6 bytes), attempts (3) and due (ms, 6 bytes),
// big-endian, then the body (envelope.lua's entry and header).
const (
	headerBinary    = 1
	headerLenBinary = 16
)

var errPrefix = errors.New("bad stored prefix")

// parseStored splits a stored envelope into its header and body (without copying it).
func parseStored(s string) (stored, error) {
	if len(s) < headerLenBinary || s[0] != headerBinary {
		return stored{}, fmt.Errorf("%w: %w: not a stored header", ErrCorrupt, errPrefix)
	}
	return parseBinary(s), nil
}

// parseBinary reads the header of s, at least headerLenBinary bytes.
func parseBinary(s string) stored {
	be := func(b string) int64 {
		var n int64
		for i := 0; i < len(b); i++ {
			n = n<<8 | int64(b[i])
		}
		return n
	}
	return stored{version: be(s[1:7]), attempts: int(be(s[7:10])), due: be(s[10:16]),
		body: s[headerLenBinary:], headerLen: headerLenBinary}
}

// decodeStored parses a whole stored envelope of message id, resolving codes through
// names (decodeBodyIn).
func decodeStored(s, id string, names *nameTable) (stored, Envelope, error) {
	st, err := parseStored(s)
	if err != nil {
		return st, Envelope{}, err
	}
	env, err := decodeBodyIn([]byte(st.body), id, names)
	return st, env, err
}

// pairsLen is the most bytes the (key, value) pairs of l take in a body: each a
// uvarint-length-prefixed key and value.
func pairsLen(l headers.List) int {
	n := 0
	for _, h := range l {
		n += 2*binary.MaxVarintLen64 + len(h.Key) + len(h.Value)
	}
	return n
}

// appendFormat appends a body's format byte, chosen by where its source id src is (none,
// the message id itself, other: then followed by src, uvarint-length-prefixed).
func appendFormat(b []byte, src, id string) []byte {
	switch src {
	case "":
		return append(b, formatNoSource)
	case id:
		return append(b, formatSourceIsID)
	}
	return appendString(append(b, formatSource), src)
}
