package admin

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// Cursors (docs/design.md, "Cursors"): every position the operator's pages hand out
// (listing, a resumable bulk operation, the audit log, the dead letters) is sealed with
// HMAC-SHA256 under the store's cursor key (delaystore.Store.CursorKey: every replica
// seals and opens with the same key), over the cursor's kind, the query that issued it
// and the position. A cursor is "<base64url position>.<base64url MAC>": one that was
// altered, made up, issued for another query or of another kind is refused
// (ErrBadCursor) before its position is read.

// ErrBadCursor: a cursor that this store did not hand out for that query.
var ErrBadCursor = errors.New("bad cursor")

// Cursor kinds: a cursor of one kind is never taken for another.
const (
	// CursorList continues GET /v1/messages: its position is a ListCursor's String.
	CursorList = "list"
	// CursorOp continues a resumable bulk operation: its position is the op id.
	CursorOp = "op"
	// CursorAudit continues GET /v1/audit: its position is the op id to go on after.
	CursorAudit = "audit"
	// CursorDeadLetters continues GET /v1/dead-letters: its position is the broker's own.
	CursorDeadLetters = "sealed:deadletters"
)

// Seal returns the cursor a client gets for position raw of a query of kind (one of the
// Cursor* kinds; query the caller's canonical form of what the page selects), which Open
// takes back for that kind and query only. Without a key (Init could not read it) the
// cursor is sealed with none, and Open never takes it. It does not block.
func (a *Admin) Seal(kind, query, raw string) string {
	var key []byte
	if k := a.cursorKey.Load(); k != nil {
		key = *k
	}
	mac := cursorMAC(key, kind, query, raw)
	return base64.RawURLEncoding.EncodeToString([]byte(raw)) + "." + base64.RawURLEncoding.EncodeToString(mac)
}

// Open checks cursor v for a query of kind and returns its position; an error wrapping
// ErrBadCursor when v was not sealed by a replica of this store for that kind and query.
// When its MAC does not match, the key is read again once (a dataset reset creates a new
// one, and another replica may have done so first): it may block until Redis answered or
// ctx is done, and a Redis error is then returned as is.
func (a *Admin) Open(ctx context.Context, kind, query, v string) (string, error) {
	b64raw, b64mac, ok := strings.Cut(v, ".")
	raw, err1 := base64.RawURLEncoding.DecodeString(b64raw)
	mac, err2 := base64.RawURLEncoding.DecodeString(b64mac)
	if !ok || err1 != nil || err2 != nil || len(mac) != sha256.Size {
		return "", fmt.Errorf("%w: not a cursor this bridge hands out", ErrBadCursor)
	}
	for reloaded := false; ; reloaded = true {
		if k := a.cursorKey.Load(); k != nil && hmac.Equal(mac, cursorMAC(*k, kind, query, string(raw))) {
			return string(raw), nil
		}
		if reloaded {
			return "", fmt.Errorf("%w: not issued by this bridge for this %s query (altered, made up, or for another selector)", ErrBadCursor, kind)
		}
		if err := a.loadCursorKey(ctx); err != nil {
			return "", err
		}
	}
}

// loadCursorKey reads the store's cursor key and keeps it.
func (a *Admin) loadCursorKey(ctx context.Context) error {
	key, err := a.store.CursorKey(ctx)
	if err != nil {
		return err
	}
	a.cursorKey.Store(&key)
	return nil
}

// cursorMAC is the MAC of position raw of a cursor of kind for query, each field length
// prefixed (no two different triples share an input).
func cursorMAC(key []byte, kind, query, raw string) []byte {
	m := hmac.New(sha256.New, key)
	var n [binary.MaxVarintLen64]byte
	for _, f := range []string{kind, query, raw} {
		m.Write(n[:binary.PutUvarint(n[:], uint64(len(f)))])
		m.Write([]byte(f))
	}
	return m.Sum(nil)
}
