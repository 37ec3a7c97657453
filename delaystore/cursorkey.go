package delaystore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// cursorKeyBytes is the length of a random cursor key.
const cursorKeyBytes = 32

// CursorKey returns the key that the operator's cursors are sealed with (package admin):
// the random value of P:cursor, created once with SET NX by whichever replica asks first
// and read back, so every replica of the store seals and opens with the same key. A
// dataset reset removes it; the next call creates a new one. A value that is not hex of at
// least 16 bytes is an error (never a guessable key). A full Redis refuses the SET even
// for an existing key: what counts is the GET. It blocks until Redis answered or ctx is
// done; safe for concurrent use.
func (s *Store) CursorKey(ctx context.Context) ([]byte, error) {
	var fresh [cursorKeyBytes]byte
	_, _ = rand.Read(fresh[:]) // never fails (crypto/rand)
	if err := s.rdb.SetNX(ctx, s.cursorKey, hex.EncodeToString(fresh[:]), 0).Err(); err != nil && !IsOOM(err) {
		return nil, fmt.Errorf("cursor key: create %s: %w", s.cursorKey, err)
	}
	v, err := s.rdb.Get(ctx, s.cursorKey).Result()
	if err != nil {
		return nil, fmt.Errorf("cursor key: read %s: %w", s.cursorKey, err)
	}
	key, err := hex.DecodeString(v)
	if err != nil || len(key) < 16 {
		return nil, fmt.Errorf("cursor key: redis key %s does not hold a hex key of at least 16 bytes", s.cursorKey)
	}
	return key, nil
}
