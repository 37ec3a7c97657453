package admin

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/delaystore"
)

// TestCursorsSealed: a cursor opens only for the kind and the query it was sealed for, by
// any replica on the same Redis; an altered, made-up or unsealed one (a forged position
// "0\nz\n\n\n9000000000000000000") is ErrBadCursor.
func TestCursorsSealed(t *testing.T) {
	f := setup(t)
	ctx := t.Context()
	lc := ListCursor{Score: "1700000000000", ID: "a"}
	op := f.a.Seal(CursorOp, "reschedule tgt.*", "0123456789abcdef0123456789abcdef")
	list := f.a.Seal(CursorList, "tgt.*", lc.String())
	if got, err := f.a.Open(ctx, CursorOp, "reschedule tgt.*", op); err != nil || got != "0123456789abcdef0123456789abcdef" {
		t.Fatalf("op round trip: %q %v", got, err)
	}
	raw, err := f.a.Open(ctx, CursorList, "tgt.*", list)
	if got, perr := ParseListCursor(raw); err != nil || perr != nil || got != lc {
		t.Fatalf("list round trip: %+v %v %v", got, err, perr)
	}
	// Another replica (a store and an Admin of its own on the same Redis and prefix) opens them.
	if got, err := f.replica(t, 0).Open(ctx, CursorOp, "reschedule tgt.*", op); err != nil || got != "0123456789abcdef0123456789abcdef" {
		t.Fatalf("op cursor on another replica: %q %v", got, err)
	}

	b64, mac, _ := strings.Cut(op, ".")
	pos, _ := base64.RawURLEncoding.DecodeString(b64)
	altered := base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(pos), "0123", "9999", 1))) + "." + mac
	forged := base64.RawURLEncoding.EncodeToString([]byte("0\nz\n\n\n9000000000000000000"))
	for name, v := range map[string]string{
		"a forged cursor":                      forged,
		"forged, with a made-up MAC":           forged + "." + mac,
		"a position altered under its MAC":     altered,
		"empty MAC":                            b64 + ".",
		"the MAC alone":                        "." + mac,
		"a list cursor":                        list,
		"garbage":                              "%%%.%%%",
		"an old unsealed list cursor (l1 ...)": base64.RawURLEncoding.EncodeToString([]byte("l1\n0\na")),
	} {
		if _, err := f.a.Open(ctx, CursorOp, "reschedule tgt.*", v); !errors.Is(err, ErrBadCursor) {
			t.Errorf("op, %s: %v, want ErrBadCursor", name, err)
		}
	}
	for name, q := range map[string]string{"another selector": "reschedule tgt.fc2.*", "empty": "", "a prefix": "reschedule tgt."} {
		if _, err := f.a.Open(ctx, CursorOp, q, op); !errors.Is(err, ErrBadCursor) {
			t.Errorf("op cursor for %s: %v, want ErrBadCursor", name, err)
		}
	}
	if _, err := f.a.Open(ctx, CursorList, "tgt.x", list); !errors.Is(err, ErrBadCursor) {
		t.Errorf("list cursor for another selector: %v, want ErrBadCursor", err)
	}
	if _, err := f.a.Open(ctx, CursorList, "reschedule tgt.*", op); !errors.Is(err, ErrBadCursor) {
		t.Errorf("an op cursor as a list cursor: %v, want ErrBadCursor", err)
	}
	for _, bad := range []string{"", "l1\nx\na", "l2\n1\na", "l1\n1"} {
		if _, err := ParseListCursor(bad); !errors.Is(err, ErrBadCursor) {
			t.Errorf("list position %q: %v, want ErrBadCursor", bad, err)
		}
	}
}

// TestCursorKeyAfterReset: the cursor key lives in Redis (P:cursor, created once); when a
// dataset reset removed it, the replica that comes first creates a new one, and one that
// kept the old key in memory reads the new one when a cursor does not open with its own.
func TestCursorKeyAfterReset(t *testing.T) {
	f := setup(t)
	ctx := t.Context()
	key, err := f.rdb.Get(ctx, f.prefix+":cursor").Result()
	if err != nil || len(key) != 64 {
		t.Fatalf("P:cursor after Init: %q %v", key, err)
	}
	if err := f.a.Init(ctx); err != nil { // again: the key stays
		t.Fatal(err)
	}
	if again, _ := f.rdb.Get(ctx, f.prefix+":cursor").Result(); again != key {
		t.Fatal("a second Init replaced the cursor key")
	}
	if err := f.rdb.Del(ctx, f.prefix+":cursor").Err(); err != nil {
		t.Fatal(err)
	}
	other := f.replica(t, 0)
	c := ListCursor{Score: "5", ID: "x"}
	if raw, err := f.a.Open(ctx, CursorList, "q", other.Seal(CursorList, "q", c.String())); err != nil || raw != c.String() {
		t.Fatalf("a new replica's cursor on the old one: %q %v", raw, err)
	}
	if _, err := f.rdb.Get(ctx, f.prefix+":cursor").Result(); errors.Is(err, redis.Nil) {
		t.Fatal("no cursor key after the reset")
	}
}

// TestCursorKeyCorrupt: a P:cursor that does not hold a key does not stop the store's
// Init (delivery does not need it); Init of the Admin says so, and every cursor is refused
// rather than sealed with a guessable key.
func TestCursorKeyCorrupt(t *testing.T) {
	f := setup(t)
	ctx := t.Context()
	if err := f.rdb.Set(ctx, f.prefix+":cursor", "not hex", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s, err := delaystore.New(f.rdb, delaystore.Config{KeyPrefix: f.prefix, Shards: 4, Lease: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Init(ctx); err != nil {
		t.Fatalf("the store's Init with a corrupt cursor key: %v", err)
	}
	a := New(s)
	if err := a.Init(ctx); err == nil {
		t.Fatal("Init read a corrupt cursor key")
	}
	if _, err := a.Open(ctx, CursorList, "q", a.Seal(CursorList, "q", ListCursor{Score: "1", ID: "a"}.String())); err == nil {
		t.Fatal("a cursor opened without a cursor key")
	}
}
