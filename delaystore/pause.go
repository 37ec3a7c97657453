package delaystore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/delaybridge/delaybridge/internal/glob"
)

// The pause set (docs/design.md, "Paused targets") is bounded: at most MaxPaused globs
// paused at once, at most pauseFields fields with the resumed ones, each kept
// ResumedKeep after its resume.
const (
	MaxPaused   = 64
	pauseFields = 256
	// ResumedKeep is how long the pause set remembers a resume: egress counts the
	// lateness of a message due before it from the resume.
	ResumedKeep = time.Hour
	// PauseHold is how long egress puts a claimed message of a paused target back for
	// (or until its expiry, when earlier): so a resume finds them scored within PauseHold
	// of its time.
	PauseHold = 10 * time.Minute
	// unpauseChunk is the entries UnpauseShard reads per call.
	unpauseChunk = 500
)

// ErrTooManyPaused: the pause set holds as many globs as it takes (MaxPaused paused, or
// pauseFields with the recently resumed ones).
var ErrTooManyPaused = errors.New("too many paused targets")

// Pause is one glob of the pause set.
type Pause struct {
	// Glob selects targets as BRIDGE_TARGET_RATE's patterns do (glob.MatchTarget).
	Glob string
	// Paused is when it was paused, Redis ms.
	Paused int64
	// Resumed is when it was resumed, Redis ms; 0 while it is paused.
	Resumed int64
}

// PauseChange is what PauseTarget or ResumeTarget did.
type PauseChange struct {
	// Changed: the glob was paused (PauseTarget) or resumed (ResumeTarget) by this call;
	// false when it already was paused, or was not paused.
	Changed bool
	// Now is the Redis time of the call (ms), Paused when the glob was paused (0 when it
	// was not paused).
	Now, Paused int64
}

// PauseTarget adds pattern to the pause set, for the whole fleet (pause.lua; a change is
// told to every replica's Wakeups as WakePauses). A glob
// already paused is left as it is (Changed false, Paused its time). A pattern that is
// not a valid selector glob (glob.CompileSelector) is an error wrapping glob.ErrMalformed
// or glob.ErrTooLong, a full set ErrTooManyPaused. With Config.MinReplicas the call, a
// repeated one too, is confirmed by WAIT (ErrNotReplicated: the pause may be lost in a
// failover; call again). It blocks until Redis answered or ctx is done.
func (s *Store) PauseTarget(ctx context.Context, pattern string) (PauseChange, error) {
	return s.pause(ctx, "p", pattern)
}

// ResumeTarget takes pattern out of the pause set (marked resumed for ResumedKeep). A
// glob that is not paused is left as it is (Changed false). It does not move any message:
// Unpause does. Confirmed by WAIT as PauseTarget is. It blocks until Redis answered or
// ctx is done.
func (s *Store) ResumeTarget(ctx context.Context, pattern string) (PauseChange, error) {
	return s.pause(ctx, "r", pattern)
}

func (s *Store) pause(ctx context.Context, op, pattern string) (PauseChange, error) {
	if _, err := glob.CompileSelector(pattern); err != nil {
		return PauseChange{}, fmt.Errorf("pause: %w", err)
	}
	c := call{keys: []string{s.pauseKey}, args: []any{op, pattern, MaxPaused, pauseFields, ResumedKeep.Milliseconds(),
		s.fleetChannel}, fence: s.pauseFence}
	res, err := s.evalConfirmed(ctx, s.scripts[scriptPause], []call{c})[0].Int64Slice()
	if err != nil {
		return PauseChange{}, fmt.Errorf("pause %q: %w", pattern, err)
	}
	if len(res) != 3 {
		return PauseChange{}, fmt.Errorf("pause %q: unexpected reply of %d values", pattern, len(res))
	}
	if res[0] < 0 {
		return PauseChange{}, fmt.Errorf("pause %q: %w (at most %d)", pattern, ErrTooManyPaused, MaxPaused)
	}
	return PauseChange{Changed: res[0] == 1, Now: res[1], Paused: res[2]}, nil
}

// Pauses returns the pause set, by glob: the paused globs and those resumed within
// ResumedKeep. One HGETALL of a bounded hash; a field that does not parse is left out.
// It blocks until Redis answered or ctx is done.
func (s *Store) Pauses(ctx context.Context) ([]Pause, error) {
	m, err := s.rdb.HGetAll(ctx, s.pauseKey).Result()
	if err != nil {
		return nil, fmt.Errorf("pauses: %w", err)
	}
	out := make([]Pause, 0, len(m))
	for g, v := range m {
		if p, ok := parsePause(g, v); ok {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Glob < out[j].Glob })
	return out, nil
}

// parsePause reads one field of the pause set: "p,<ms>" or "r,<ms>,<ms>".
func parsePause(g, v string) (Pause, bool) {
	parts := strings.Split(v, ",")
	p := Pause{Glob: g}
	var err error
	switch {
	case len(parts) == 2 && parts[0] == "p":
		p.Paused, err = strconv.ParseInt(parts[1], 10, 64)
	case len(parts) == 3 && parts[0] == "r":
		if p.Paused, err = strconv.ParseInt(parts[1], 10, 64); err == nil {
			p.Resumed, err = strconv.ParseInt(parts[2], 10, 64)
		}
		if err == nil && p.Resumed == 0 {
			return p, false
		}
	default:
		return p, false
	}
	return p, err == nil
}

// Unpause gives the entries of one shard that a scan read back their due time when they
// still wait, as read, for a later time (a put-back or a retry: an odd score after now,
// not held by an ordering key): unpause.lua. It returns how many moved; a wake-up goes to
// the shard's owner when the head became earlier. It blocks until Redis answered or ctx
// is done.
func (s *Store) Unpause(ctx context.Context, shard int, entries []Scanned) (int, error) {
	if err := s.checkShard(shard); err != nil {
		return 0, fmt.Errorf("unpause: %w", err)
	}
	if len(entries) == 0 {
		return 0, nil
	}
	k := s.keys[shard]
	args := make([]any, 0, 2+3*len(entries))
	args = append(args, k.wake, k.shardID)
	for _, e := range entries {
		args = append(args, e.ID, e.Version, e.Scheduled)
	}
	n, err := s.scripts[scriptUnpause].Run(ctx, s.rdb, k.zm, args...).Int64()
	if err != nil {
		return 0, fmt.Errorf("unpause shard %d: %w", shard, err)
	}
	return int(n), nil
}

// UnpauseShard is a resume's pass over one shard: every entry scored in [from, to] (to is
// capped below the held entries of ordering keys, which wait for their predecessor) that
// waits past its due time (a put-back) and whose target match accepts gets its due time
// back (Unpause), read in chunks of 500 by Scan with literals (glob.Literals of the
// resumed glob: a target lacking them is not read back). It returns how many moved, also
// when a call fails. It blocks until done, ctx is done, or a Redis call fails.
func (s *Store) UnpauseShard(ctx context.Context, shard int, literals []string, match func(target string) bool, from, to int64) (int, error) {
	to = min(to, heldScore-1)
	moved := 0
	after := Position{}
	for {
		page := s.Scan(ctx, []ScanRequest{{Shard: shard, From: from, To: to, After: after, Count: unpauseChunk,
			Literals: literals}})[0]
		if page.Err != nil {
			return moved, fmt.Errorf("unpause: scan shard %d: %w", shard, page.Err)
		}
		if page.Again {
			continue
		}
		var picks []Scanned
		for _, e := range page.Entries {
			if e.Err == nil && e.Scheduled%2 == 1 && e.Scheduled > e.Due && match(e.Target) {
				picks = append(picks, e)
			}
		}
		n, err := s.Unpause(ctx, shard, picks)
		moved += n
		if err != nil {
			return moved, err
		}
		if page.Through {
			return moved, nil
		}
		after = page.Next
	}
}
