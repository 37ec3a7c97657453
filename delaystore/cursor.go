package delaystore

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Cursors (docs/design.md, "Cursors"): the positions that List and Bulk hand out are
// sealed with HMAC-SHA256 under a random key that the store keeps in Redis (P:cursor,
// created once with SET NX, read by Init: every replica seals and opens with the same
// key), over the kind of cursor, the query that issued it and the position. A cursor is
// "<base64url position>.<base64url MAC>": one that was altered, made up, or issued for
// another query is refused (ErrBadCursor) before its position is read.

// ErrBadCursor: a cursor that this store did not hand out for that query.
var ErrBadCursor = errors.New("bad cursor")

// cursorKeyBytes is the length of the random cursor key.
const cursorKeyBytes = 32

// Cursor kinds: a list cursor is never taken by Bulk, nor the other way round.
const (
	cursorList  = "list"
	cursorBulk  = "bulk"
	cursorOp    = "op"    // a resumable bulk operation's next_cursor: its op id
	cursorAudit = "audit" // GET /v1/audit: the op id to go on after
)

// loadCursorKey creates the cursor key in Redis unless it exists (SET NX, a random value)
// and keeps the value then stored. A full Redis refuses the SET even for an existing key:
// what counts is the GET.
func (s *Store) loadCursorKey(ctx context.Context) error {
	var fresh [cursorKeyBytes]byte
	_, _ = rand.Read(fresh[:]) // never fails (crypto/rand)
	if err := s.rdb.SetNX(ctx, s.cursorKeyName, hex.EncodeToString(fresh[:]), 0).Err(); err != nil && !IsOOM(err) {
		return fmt.Errorf("cursor key: create %s: %w", s.cursorKeyName, err)
	}
	v, err := s.rdb.Get(ctx, s.cursorKeyName).Result()
	if err != nil {
		return fmt.Errorf("cursor key: read %s: %w", s.cursorKeyName, err)
	}
	key, err := hex.DecodeString(v)
	if err != nil || len(key) < 16 {
		return fmt.Errorf("cursor key: redis key %s does not hold a hex key of at least 16 bytes", s.cursorKeyName)
	}
	s.cursorKey.Store(&key)
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

// seal returns the cursor a client gets for position raw of a query of kind. Without a
// key (Init could not load it) the cursor is sealed with none: open never takes it.
func (s *Store) seal(kind, query, raw string) string {
	var key []byte
	if k := s.cursorKey.Load(); k != nil {
		key = *k
	}
	mac := cursorMAC(key, kind, query, raw)
	return base64.RawURLEncoding.EncodeToString([]byte(raw)) + "." + base64.RawURLEncoding.EncodeToString(mac)
}

// open checks cursor v for a query of kind and returns its position; an error wrapping
// ErrBadCursor when v was not sealed by a store of this Redis for that query. When its
// MAC does not match, the key is read again once (a dataset reset re-creates it, and
// another replica may have done so first); a Redis error then is returned as is.
func (s *Store) open(ctx context.Context, kind, query, v string) (string, error) {
	b64raw, b64mac, ok := strings.Cut(v, ".")
	raw, err1 := base64.RawURLEncoding.DecodeString(b64raw)
	mac, err2 := base64.RawURLEncoding.DecodeString(b64mac)
	if !ok || err1 != nil || err2 != nil || len(mac) != sha256.Size {
		return "", fmt.Errorf("%w: not a cursor this bridge hands out", ErrBadCursor)
	}
	for reloaded := false; ; reloaded = true {
		if k := s.cursorKey.Load(); k != nil && hmac.Equal(mac, cursorMAC(*k, kind, query, string(raw))) {
			return string(raw), nil
		}
		if reloaded {
			return "", fmt.Errorf("%w: not issued by this bridge for this %s query (altered, made up, or for another selector)", ErrBadCursor, kind)
		}
		if err := s.loadCursorKey(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return "", err
		}
	}
}
