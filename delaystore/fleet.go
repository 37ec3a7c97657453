package delaystore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
)

//go:embed lua/member.lua
var memberSrc string

// MaxMemberID is the longest accepted replica id of Heartbeat and Leave, in bytes.
const MaxMemberID = 200

// Members is the answer of Heartbeat.
type Members struct {
	// Now is the Redis time of the call, unix ms.
	Now int64
	// Version is the membership version after the call.
	Version int64
	// Changed: Version differs from the caller's known version; IDs is then set.
	Changed bool
	// IDs are the live members, sorted ascending (the caller included); nil unless Changed.
	IDs []string
}

// Heartbeat adds or renews replica id in the fleet ("{P:fleet}:members"), live until the
// Redis TIME of the call + ttl (rounded up to the millisecond), and removes the members whose
// time ran out. When the set changed (a join, an expiry) it increments the membership
// version and publishes it on the fleet channel ("P:wake:fleet", see Wakeups). It returns
// the member list only when the version after the call differs from known (a steady
// heartbeat costs O(1)). One script call (member.lua), one round trip; it runs on a full
// Redis too (allow-oom). id must be non-empty and at most MaxMemberID bytes, ttl at least
// 1ms. It blocks until Redis answered or ctx is done; safe for concurrent use.
func (s *Store) Heartbeat(ctx context.Context, id string, ttl time.Duration, known int64) (Members, error) {
	if err := checkMemberID(id); err != nil {
		return Members{}, fmt.Errorf("heartbeat: %w", err)
	}
	if ttl < time.Millisecond {
		return Members{}, fmt.Errorf("heartbeat %s: ttl %s is shorter than 1ms", id, ttl)
	}
	res, err := s.member.Run(ctx, s.rdb, s.fleetKeys, id, ceilMS(ttl), strconv.FormatInt(known, 10), s.fleetChannel).Slice()
	if err != nil {
		return Members{}, fmt.Errorf("heartbeat %s: %w", id, err)
	}
	m, err := membersOf(res, known)
	if err != nil {
		return Members{}, fmt.Errorf("heartbeat %s: %w", id, err)
	}
	return m, nil
}

// Leave removes replica id from the fleet; when it was a member the membership version is
// incremented and published, as in Heartbeat. Leaving twice, or without having joined, is
// no error. One script call; it blocks until Redis answered or ctx is done; safe for
// concurrent use.
func (s *Store) Leave(ctx context.Context, id string) error {
	if err := checkMemberID(id); err != nil {
		return fmt.Errorf("leave: %w", err)
	}
	if err := s.member.Run(ctx, s.rdb, s.fleetKeys, id, -1, "-1", s.fleetChannel).Err(); err != nil {
		return fmt.Errorf("leave %s: %w", id, err)
	}
	return nil
}

func checkMemberID(id string) error {
	switch {
	case id == "":
		return errors.New("empty replica id")
	case len(id) > MaxMemberID:
		return fmt.Errorf("replica id of %d bytes, longer than %d", len(id), MaxMemberID)
	}
	return nil
}

// membersOf reads member.lua's reply {now, version, ids...}.
func membersOf(res []any, known int64) (Members, error) {
	if len(res) < 2 {
		return Members{}, fmt.Errorf("unexpected reply of %d values", len(res))
	}
	now, err1 := toInt64(res[0])
	version, err2 := toInt64(res[1])
	if err := errors.Join(err1, err2); err != nil {
		return Members{}, err
	}
	m := Members{Now: now, Version: version, Changed: version != known}
	if !m.Changed {
		return m, nil
	}
	m.IDs = make([]string, 0, len(res)-2)
	for _, v := range res[2:] {
		id, ok := v.(string)
		if !ok {
			return Members{}, fmt.Errorf("unexpected member type %T", v)
		}
		m.IDs = append(m.IDs, id)
	}
	slices.Sort(m.IDs)
	return m, nil
}
