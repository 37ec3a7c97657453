package delaystore

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestCursorsSealed (issue 23 item 7): a cursor opens only for the kind and the query it
// was sealed for, by any store on the same Redis (another replica); an altered, made-up
// or unsealed one (the forged "0\nz\n\n\n9000000000000000000") is ErrBadCursor.
func TestCursorsSealed(t *testing.T) {
	f := setup(t)
	ctx := t.Context()
	bc := BulkCursor{Shard: 1, Pass: "z", Score: "1700000000000", ID: "a", MaxVersion: 7}
	lc := ListCursor{Score: "1700000000000", ID: "a"}
	bulk := f.s.SealBulkCursor(bc, "reschedule tgt.*")
	list := f.s.SealListCursor(lc, "tgt.*")
	if got, err := f.s.ParseBulkCursor(ctx, bulk, "reschedule tgt.*"); err != nil || got != bc {
		t.Fatalf("bulk round trip: %+v %v", got, err)
	}
	if got, err := f.s.ParseListCursor(ctx, list, "tgt.*"); err != nil || got != lc {
		t.Fatalf("list round trip: %+v %v", got, err)
	}
	// Another replica (a store of its own on the same Redis and prefix) opens them.
	other, err := New(f.rdb, Config{KeyPrefix: f.prefix, Shards: 4, Lease: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := other.ParseBulkCursor(ctx, bulk, "reschedule tgt.*"); err != nil || got != bc {
		t.Fatalf("bulk cursor on another replica: %+v %v", got, err)
	}

	raw, mac, _ := strings.Cut(bulk, ".")
	pos, _ := base64.RawURLEncoding.DecodeString(raw)
	altered := base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(pos), "\n7", "\n9000000000000000000", 1))) + "." + mac
	forged := base64.RawURLEncoding.EncodeToString([]byte("0\nz\n\n\n9000000000000000000"))
	for name, v := range map[string]string{
		"the issue's forged cursor":            forged,
		"forged, with a made-up MAC":           forged + "." + mac,
		"a position altered under its MAC":     altered,
		"empty MAC":                            raw + ".",
		"the MAC alone":                        "." + mac,
		"a list cursor":                        list,
		"garbage":                              "%%%.%%%",
		"an old unsealed list cursor (l1 ...)": base64.RawURLEncoding.EncodeToString([]byte("l1\n0\na")),
	} {
		if _, err := f.s.ParseBulkCursor(ctx, v, "reschedule tgt.*"); !errors.Is(err, ErrBadCursor) {
			t.Errorf("bulk, %s: %v, want ErrBadCursor", name, err)
		}
	}
	for name, q := range map[string]string{"another selector": "reschedule tgt.fc2.*", "empty": "", "a prefix": "reschedule tgt."} {
		if _, err := f.s.ParseBulkCursor(ctx, bulk, q); !errors.Is(err, ErrBadCursor) {
			t.Errorf("bulk cursor for %s: %v, want ErrBadCursor", name, err)
		}
	}
	if _, err := f.s.ParseListCursor(ctx, list, "tgt.x"); !errors.Is(err, ErrBadCursor) {
		t.Errorf("list cursor for another selector: %v, want ErrBadCursor", err)
	}
	if _, err := f.s.ParseListCursor(ctx, bulk, "reschedule tgt.*"); !errors.Is(err, ErrBadCursor) {
		t.Errorf("a bulk cursor as a list cursor: %v, want ErrBadCursor", err)
	}
}

// TestCursorKeyAfterReset: the cursor key lives in Redis (P:cursor, created once); when a
// dataset reset removed it, the replica that comes first creates a new one, and one that
// kept the old key in memory reads the new one when a cursor does not open with its own.
func TestCursorKeyAfterReset(t *testing.T) {
	f := setup(t)
	ctx := t.Context()
	key, err := f.rdb.Get(ctx, f.prefix+":cursor").Result()
	if err != nil || len(key) != 2*cursorKeyBytes {
		t.Fatalf("P:cursor after Init: %q %v", key, err)
	}
	if err := f.s.Init(ctx); err != nil { // again: the key stays
		t.Fatal(err)
	}
	if again, _ := f.rdb.Get(ctx, f.prefix+":cursor").Result(); again != key {
		t.Fatal("a second Init replaced the cursor key")
	}
	if err := f.rdb.Del(ctx, f.prefix+":cursor").Err(); err != nil {
		t.Fatal(err)
	}
	other, err := New(f.rdb, Config{KeyPrefix: f.prefix, Shards: 4, Lease: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Init(ctx); err != nil {
		t.Fatal(err)
	}
	c := ListCursor{Score: "5", ID: "x"}
	if got, err := f.s.ParseListCursor(ctx, other.SealListCursor(c, "q"), "q"); err != nil || got != c {
		t.Fatalf("a new replica's cursor on the old one: %+v %v", got, err)
	}
	if _, err := f.rdb.Get(ctx, f.prefix+":cursor").Result(); errors.Is(err, redis.Nil) {
		t.Fatal("no cursor key after the reset")
	}
}

// TestCursorKeyCorrupt: a P:cursor that does not hold a key does not stop Init (delivery
// does not need it), and every cursor is refused rather than sealed with a guessable key.
func TestCursorKeyCorrupt(t *testing.T) {
	f := setup(t)
	ctx := t.Context()
	if err := f.rdb.Set(ctx, f.prefix+":cursor", "not hex", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s, err := New(f.rdb, Config{KeyPrefix: f.prefix, Shards: 4, Lease: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Init(ctx); err != nil {
		t.Fatalf("Init with a corrupt cursor key: %v", err)
	}
	if _, err := s.ParseListCursor(ctx, s.SealListCursor(ListCursor{Score: "1", ID: "a"}, "q"), "q"); err == nil {
		t.Fatal("a cursor opened without a cursor key")
	}
}
