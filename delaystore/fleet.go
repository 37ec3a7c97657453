package delaystore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

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
	// IDs are the live members, sorted ascending; nil unless Changed. The caller is among
	// them once it has been Confirmed.
	IDs []string
	// Token is what the caller's next heartbeat must show to be confirmed.
	Token string
	// Confirmed: the heartbeat showed the token of the caller's previous answer, so the
	// caller is live until Now + ttl. An unconfirmed heartbeat (the first one, or one after
	// a lost or late answer) renews nothing; send the next at once with the new Token.
	Confirmed bool
}

// Heartbeat adds or renews replica id in the fleet ("{P:fleet}:members"), live until the
// Redis TIME of the call + ttl (rounded up to the millisecond), when the heartbeat is
// confirmed: token is the Token of the caller's previous answer, proof that it got it. A
// heartbeat with another token (the first, "", or one after an answer that was lost or
// came too late) is not confirmed: it only gets a new Token (and a pending entry that owns
// nothing), so a replica whose answers stall cannot stay live by requests that still reach
// Redis. It removes the entries whose time ran out. When the set changed (a join, an expiry) it increments the membership
// version and publishes it on the fleet channel ("P:wake:fleet", see Wakeups). It returns
// the member list only when the version after the call differs from known (a steady
// heartbeat costs O(1)). One script call (member.lua), one round trip; it runs on a full
// Redis too (allow-oom). id must be non-empty and at most MaxMemberID bytes, ttl at least
// 1ms. It blocks until Redis answered or ctx is done; safe for concurrent use.
func (s *Store) Heartbeat(ctx context.Context, id string, ttl time.Duration, known int64, token string) (Members, error) {
	if err := checkMemberID(id); err != nil {
		return Members{}, fmt.Errorf("heartbeat: %w", err)
	}
	if ttl < time.Millisecond {
		return Members{}, fmt.Errorf("heartbeat %s: ttl %s is shorter than 1ms", id, ttl)
	}
	res, err := s.scripts[scriptMember].Run(ctx, s.rdb, s.fleetKeys, id, ceilMS(ttl), strconv.FormatInt(known, 10), s.fleetChannel, token).Slice()
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
	if err := s.scripts[scriptMember].Run(ctx, s.rdb, s.fleetKeys, id, -1, "-1", s.fleetChannel, "").Err(); err != nil {
		return fmt.Errorf("leave %s: %w", id, err)
	}
	return nil
}

// LiveMembers returns how many replicas of the fleet ({P:fleet}:members) are live at now
// (their time has not run out; an expired entry that no heartbeat removed yet is not
// counted). One ZCOUNT; it blocks until Redis answered or ctx is done.
func (s *Store) LiveMembers(ctx context.Context, now time.Time) (int64, error) {
	n, err := s.rdb.ZCount(ctx, s.fleetKeys[0], "("+strconv.FormatInt(now.UnixMilli(), 10), "+inf").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("live members: %w", err)
	}
	return n, nil
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

// membersOf reads member.lua's reply {now, version, token, confirmed, ids...}.
func membersOf(res []any, known int64) (Members, error) {
	if len(res) < 4 {
		return Members{}, fmt.Errorf("unexpected reply of %d values", len(res))
	}
	now, err1 := toInt64(res[0])
	version, err2 := toInt64(res[1])
	token, ok := res[2].(string)
	confirmed, err3 := toInt64(res[3])
	if err := errors.Join(err1, err2, err3); err != nil {
		return Members{}, err
	}
	if !ok {
		return Members{}, fmt.Errorf("unexpected token type %T", res[2])
	}
	m := Members{Now: now, Version: version, Changed: version != known, Token: token, Confirmed: confirmed == 1}
	if !m.Changed {
		return m, nil
	}
	m.IDs = make([]string, 0, len(res)-4)
	for _, v := range res[4:] {
		id, ok := v.(string)
		if !ok {
			return Members{}, fmt.Errorf("unexpected member type %T", v)
		}
		m.IDs = append(m.IDs, id)
	}
	slices.Sort(m.IDs)
	return m, nil
}
