package admin

import (
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/internal/testredis"
)

// statsKey is the key of the fleet's bucket of kind (1m, 1h) that starts at start.
func (f *fixture) statsKey(kind string, start time.Time) string {
	return "{" + f.prefix + ":fleet}:stats:" + kind + ":" + strconv.FormatInt(start.Unix(), 10)
}

// AddStats adds every field to the minute and the hour bucket of its time (two replicas'
// calls add up; a zero count is left out), sets them to expire MinuteStatsKept and
// HourStatsKept after the bucket's start, and ReadStats reads the buckets back oldest
// first, empty where nobody added. The key names are the buckets' starts whatever the
// fields say.
func TestStatsBuckets(t *testing.T) {
	f := setup(t)
	ctx := t.Context()
	// Buckets in the future, so that their expiry times lie ahead of Redis' clock.
	at := time.Now().Add(time.Hour).Truncate(time.Hour).Add(30*time.Minute + 10*time.Second)
	hostile := "{" + f.prefix + ":0}:z*]]..redis.call('FLUSHALL')..[["
	if err := f.a.AddStats(ctx, at, map[string]int64{"in:parked": 5, "out:published": 3, "zero": 0, hostile: 1}); err != nil {
		t.Fatal(err)
	}
	if err := f.a.AddStats(ctx, at.Add(20*time.Second), map[string]int64{"in:parked": 2}); err != nil { // another replica, same minute
		t.Fatal(err)
	}
	if err := f.a.AddStats(ctx, at.Add(time.Minute), map[string]int64{"in:parked": 7}); err != nil { // the next minute
		t.Fatal(err)
	}
	minutes, err := f.a.ReadStats(ctx, time.Minute, at.Add(-time.Minute), 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []map[string]int64{{}, {"in:parked": 7, "out:published": 3, hostile: 1}, {"in:parked": 7}}
	for i := range want {
		if !maps.Equal(minutes[i], want[i]) {
			t.Errorf("minute %d = %v, want %v", i, minutes[i], want[i])
		}
	}
	hours, err := f.a.ReadStats(ctx, time.Hour, at, 1)
	if err != nil {
		t.Fatal(err)
	}
	if wantH := map[string]int64{"in:parked": 14, "out:published": 3, hostile: 1}; !maps.Equal(hours[0], wantH) {
		t.Errorf("hour = %v, want %v", hours[0], wantH)
	}
	keys, err := f.rdb.Keys(ctx, "*:stats:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	minuteStart, hourStart := at.Truncate(time.Minute), at.Truncate(time.Hour)
	expiry := map[string]time.Time{
		f.statsKey("1m", minuteStart):                  minuteStart.Add(MinuteStatsKept),
		f.statsKey("1m", minuteStart.Add(time.Minute)): minuteStart.Add(time.Minute + MinuteStatsKept),
		f.statsKey("1h", hourStart):                    hourStart.Add(HourStatsKept),
	}
	if len(keys) != len(expiry) {
		t.Fatalf("keys %q, want the 3 buckets %v", keys, expiry)
	}
	for k, exp := range expiry {
		if !strings.HasPrefix(k, "{"+f.prefix+":fleet}:stats:") {
			t.Errorf("key %q is not under the fleet's hash tag", k)
		}
		got, err := f.rdb.PExpireTime(ctx, k).Result()
		if err != nil || got != time.Duration(exp.UnixMilli())*time.Millisecond {
			t.Errorf("%s expires at %v (%v), want %d ms", k, got, err, exp.UnixMilli())
		}
	}
	if MinuteStatsKept <= time.Hour || HourStatsKept <= 7*24*time.Hour {
		t.Errorf("buckets kept %s and %s: want more than the 1h and 7d the overview shows", MinuteStatsKept, HourStatsKept)
	}
}

// AddStats refuses what would not be the bridge's own fields (empty, too long, too many,
// a negative count) without touching Redis, and does nothing for no count; ReadStats
// refuses other steps and bucket counts.
func TestStatsBounds(t *testing.T) {
	f := setup(t)
	ctx := t.Context()
	many := map[string]int64{}
	for i := range MaxStatsFields + 1 {
		many[strings.Repeat("x", i%50+1)+string(rune('a'+i%26))+strings.Repeat("y", i/1300)+"-"+time.Duration(i).String()] = 1
	}
	for name, c := range map[string]map[string]int64{
		"empty field": {"": 1}, "long field": {strings.Repeat("f", MaxStatsField+1): 1},
		"negative": {"in:parked": -1}, "too many": many,
	} {
		if err := f.a.AddStats(ctx, time.Now(), c); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if err := f.a.AddStats(ctx, time.Now(), map[string]int64{"in:parked": 0}); err != nil {
		t.Fatal(err)
	}
	if keys := f.rdb.Keys(ctx, "*"+f.prefix+":fleet}*").Val(); len(keys) != 0 {
		t.Fatalf("keys %q after refused calls", keys)
	}
	for _, c := range []struct {
		step time.Duration
		n    int
	}{{time.Second, 1}, {time.Minute, 0}, {time.Hour, MaxStatsBuckets + 1}} {
		if _, err := f.a.ReadStats(ctx, c.step, time.Now(), c.n); err == nil {
			t.Errorf("ReadStats(%s, %d): no error", c.step, c.n)
		}
	}
}

// BenchmarkStats: one replica's AddStats of 40 fields (a busy replica's 5 s: in and out
// results, dead-letter reasons, lateness buckets), and the fleet overview's reads, 60 and
// 168 full buckets; reports Redis CPU (INFO used_cpu_*) per call besides the round trip.
func BenchmarkStats(b *testing.B) {
	f := newFixture(b, testredis.Start(b, "--appendfsync", "everysec").URL())
	ctx := b.Context()
	fields := map[string]int64{}
	for i := range 40 {
		fields["late:"+strconv.Itoa(i)] = int64(i + 1)
	}
	at := time.Now()
	cpu := func() float64 {
		info := f.rdb.Info(ctx, "cpu").Val()
		t := 0.0
		for line := range strings.Lines(info) {
			for _, k := range []string{"used_cpu_sys:", "used_cpu_user:"} {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), k); ok {
					x, _ := strconv.ParseFloat(v, 64)
					t += x
				}
			}
		}
		return t
	}
	b.Run("add-40-fields", func(b *testing.B) {
		c0 := cpu()
		for b.Loop() {
			if err := f.a.AddStats(ctx, at, fields); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric((cpu()-c0)*1e6/float64(b.N), "redis-us/op")
	})
	for i := range 168 { // fill every bucket the overview reads
		if err := f.a.AddStats(ctx, at.Add(-time.Duration(i)*time.Hour), fields); err != nil {
			b.Fatal(err)
		}
		if i < 60 {
			if err := f.a.AddStats(ctx, at.Add(-time.Duration(i)*time.Minute), fields); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("read-60-minutes-and-168-hours", func(b *testing.B) {
		c0 := cpu()
		for b.Loop() {
			if _, err := f.a.ReadStats(ctx, time.Minute, at.Add(-59*time.Minute), 60); err != nil {
				b.Fatal(err)
			}
			if _, err := f.a.ReadStats(ctx, time.Hour, at.Add(-167*time.Hour), 168); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric((cpu()-c0)*1e6/float64(b.N), "redis-us/op")
	})
}
