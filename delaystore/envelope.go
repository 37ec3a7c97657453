package delaystore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/delaybridge/delaybridge/internal/headers"
)

// Body formats: the first byte of every encoded body; a new layout gets a new byte. They
// differ only in where the source id is: none (format 1, the only one earlier versions
// wrote), the message id itself (2: a message without x-delay-id, the common case, pays no
// byte for it), or a uvarint-length-prefixed field after the format byte (3). The Lua
// scripts read it (sourceOf in park.lua, ack.lua, cancel.lua).
const (
	formatNoSource   = 1
	formatSourceIsID = 2
	formatSource     = 3
)

// Key flag values.
const (
	keyAbsent  = 0
	keyPresent = 1
)

// Envelope fields stored as the last headers of the body, in this order, each only when
// set, so the body formats stay as they were: a bridge that predates them reads the
// entries as reserved headers, which it never sends to a broker. metaMisfire holds
// Envelope.Misfire (written first, so that a bridge that predates it still finds the two
// after it), metaExpires Envelope.Expires (decimal milliseconds, > 0), metaEvery
// Envelope.Every. metaTombstone ("1": Envelope.Tombstone) comes before them all, for the
// same reason. metaSent, first of all, is the source time of a message parked with
// Replace (ParkRequest.Published, decimal ms): cancel.lua reads it, so that a cancel does
// not delete a message its source published after the cancel; the decoder drops it.
// metaWindow, right after metaSent (so that a bridge that predates it still finds all the
// others after it), holds Envelope.Window (decimal ms, > 0) and, for a recurring message,
// ",<Envelope.Anchor>".
const (
	metaSent      = headers.ReservedPrefix + "sent"
	metaWindow    = headers.ReservedPrefix + "window"
	metaTombstone = headers.ReservedPrefix + "tombstone"
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

// takeMeta moves the trailing reserved headers of a decoded body into their Envelope
// fields (metaEvery last, then metaExpires, then metaMisfire, then metaTombstone, then
// metaWindow; metaSent, first, is dropped). A value that encodeBody would not have
// written is ErrCorrupt.
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
	if n := len(e.Headers); n > 0 && e.Headers[n-1].Key == metaSent {
		v := e.Headers[n-1].Value
		if ms, err := strconv.ParseInt(v, 10, 64); err != nil || ms <= 0 || strconv.FormatInt(ms, 10) != v {
			return fmt.Errorf("%w: sent %q", ErrCorrupt, v)
		}
		e.Headers = e.Headers[:n-1]
	}
	if len(e.Headers) == 0 {
		e.Headers = nil
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

// encodeBody encodes the Go-owned part of a stored envelope of message id: the format byte
// (1, 2 or 3, by e.SourceID: empty, equal to id, other), with format 3 the
// uvarint-length-prefixed source id, then uvarint-length-prefixed target and source, key
// flag (+ key), header count + (key, value) pairs (e.Headers, then e.metaHeaders), and the
// payload up to the end.
func encodeBody(e Envelope, id string) []byte { return encodeBodySent(e, id, 0) }

// encodeBodySent is encodeBody with the source time sent (unix ms, 0: none) stored as the
// first trailing reserved header (metaSent).
func encodeBodySent(e Envelope, id string, sent int64) []byte {
	meta := e.metaHeaders(sent)
	n := 1 + 3*binary.MaxVarintLen64 + len(e.SourceID) + len(e.Target) + len(e.Source) +
		1 + binary.MaxVarintLen64 + len(e.Key) + binary.MaxVarintLen64 + len(e.Payload)
	for _, h := range e.Headers {
		n += 2*binary.MaxVarintLen64 + len(h.Key) + len(h.Value)
	}
	for _, h := range meta {
		n += 2*binary.MaxVarintLen64 + len(h.Key) + len(h.Value)
	}
	b := make([]byte, 0, n)
	switch e.SourceID {
	case "":
		b = append(b, formatNoSource)
	case id:
		b = append(b, formatSourceIsID)
	default:
		b = append(b, formatSource)
		b = appendString(b, e.SourceID)
	}
	b = appendString(b, e.Target)
	b = appendString(b, e.Source)
	if e.Key == nil {
		b = append(b, keyAbsent)
	} else {
		b = append(b, keyPresent)
		b = binary.AppendUvarint(b, uint64(len(e.Key)))
		b = append(b, e.Key...)
	}
	b = binary.AppendUvarint(b, uint64(len(e.Headers)+len(meta)))
	for _, hs := range []headers.List{e.Headers, meta} {
		for _, h := range hs {
			b = appendString(b, h.Key)
			b = appendString(b, h.Value)
		}
	}
	return append(b, e.Payload...)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decodeBody is the inverse of encodeBody for the body of message id. It never panics:
// malformed input, and a format 3 source id that is empty or id (which encodeBody writes
// as format 1 or 2), yield an error wrapping ErrCorrupt. The returned Key and Payload
// alias b.
func decodeBody(b []byte, id string) (Envelope, error) {
	var e Envelope
	if len(b) == 0 {
		return e, fmt.Errorf("%w: empty body", ErrCorrupt)
	}
	d := decoder{b: b[1:]}
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
	e.Target = string(d.bytes("target"))
	e.Source = string(d.bytes("source"))
	switch flag := d.byte("key flag"); {
	case d.err != nil:
	case flag == keyPresent:
		e.Key = d.bytes("key")
	case flag != keyAbsent:
		d.fail(fmt.Sprintf("key flag %d", flag))
	}
	count := d.uvarint("header count")
	// Every header takes at least two bytes: bound the allocation by the input.
	if d.err == nil && count > uint64(len(d.b))/2 {
		d.fail(fmt.Sprintf("header count %d exceeds the body", count))
	}
	if d.err == nil && count > 0 {
		e.Headers = make(headers.List, 0, count)
		for i := uint64(0); i < count && d.err == nil; i++ {
			k := d.bytes("header key")
			v := d.bytes("header value")
			e.Headers = append(e.Headers, headers.Header{Key: string(k), Value: string(v)})
		}
	}
	if d.err == nil {
		d.err = e.takeMeta()
	}
	if d.err != nil {
		return Envelope{}, d.err
	}
	e.Payload = d.b
	return e, nil
}

type decoder struct {
	b   []byte
	err error
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

// stored is a stored envelope split into the Lua-owned prefix and the Go-owned body.
type stored struct {
	version  int64
	attempts int
	due      int64
	body     string
}

var errPrefix = errors.New("bad stored prefix")

// parseStored splits "<version>,<attempts>,<due>,<body>".
func parseStored(s string) (stored, error) {
	var st stored
	var fields [3]string
	rest := s
	for i := range fields {
		j := strings.IndexByte(rest, ',')
		if j < 0 {
			return st, fmt.Errorf("%w: %w", ErrCorrupt, errPrefix)
		}
		fields[i], rest = rest[:j], rest[j+1:]
	}
	var err1, err2, err3 error
	st.version, err1 = strconv.ParseInt(fields[0], 10, 64)
	attempts, err2 := strconv.ParseInt(fields[1], 10, 32)
	st.due, err3 = strconv.ParseInt(fields[2], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return stored{}, fmt.Errorf("%w: %w: %w", ErrCorrupt, errPrefix, err)
	}
	st.attempts = int(attempts)
	st.body = rest
	return st, nil
}

// decodeStored parses a whole stored envelope of message id.
func decodeStored(s, id string) (stored, Envelope, error) {
	st, err := parseStored(s)
	if err != nil {
		return st, Envelope{}, err
	}
	env, err := decodeBody([]byte(st.body), id)
	return st, env, err
}
