package feed

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/internal/schema"

	"github.com/redis/go-redis/v9"
)

// heardLog is what a reader's callbacks were told, safe for concurrent
// use.
type heardLog struct {
	mu      sync.Mutex
	entries []Entry
	resets  []bool
}

func (h *heardLog) config(rdb redis.UniversalClient, prefix string) Config {
	return Config{Client: rdb, Prefix: prefix, Interval: 10 * time.Millisecond,
		Heard: func(e Entry, _ time.Time) { h.mu.Lock(); h.entries = append(h.entries, e); h.mu.Unlock() },
		Reset: func(live bool) { h.mu.Lock(); h.resets = append(h.resets, live); h.mu.Unlock() }}
}

// of returns the entries heard of key k, in order.
func (h *heardLog) of(k string) []Entry {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Entry
	for _, e := range h.entries {
		if e.Key == k {
			out = append(out, e)
		}
	}
	return out
}

func (h *heardLog) resetsSoFar() []bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]bool(nil), h.resets...)
}

// redisMs is the Redis TIME of rdb, ms.
func redisMs(t *testing.T, rdb redis.UniversalClient) int64 {
	t.Helper()
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now.UnixMilli()
}

// TestSnapshotThenLog: a reader started after pauses were appended hears
// the ones still waiting from the snapshot (not those resumed or past),
// goes live, and then hears every later entry from the logs, in order,
// with what it says; on every Redis.
func TestSnapshotThenLog(t *testing.T) {
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			e := b.Open(t)
			ctx := context.Background()
			now := redisMs(t, e.Rdb)
			k := func(s string) string { return schema.ScopeKeys(e.Prefix, "ups", s).Pause }
			for _, en := range []Entry{
				{Key: k("waiting"), UntilMs: now + 60_000, NowMs: now},
				{Key: k("waiting"), UntilMs: now + 30_000, NowMs: now}, // never lowers the snapshot's deadline
				{Key: k("past"), UntilMs: now - 1, NowMs: now - 1000},
				{Key: k("resumed"), UntilMs: now + 60_000, NowMs: now},
				{Key: k("resumed"), Resumed: true},
			} {
				if err := Append(ctx, e.Rdb, e.Prefix, en); err != nil {
					t.Fatal(err)
				}
			}
			var h heardLog
			r := NewReader(h.config(e.Rdb, e.Prefix))
			r.Start()
			defer r.Close()
			redistest.Eventually(t, 5*time.Second, "the reader live", r.Fresh)
			if got := h.of(k("waiting")); len(got) != 1 || got[0].UntilMs != now+60_000 || !got[0].Current() {
				t.Errorf("the waiting scope from the snapshot: %+v, want one entry until %d", got, now+60_000)
			}
			for _, s := range []string{"past", "resumed"} { // no longer waiting: named, to be asked about
				if got := h.of(k(s)); len(got) != 1 || got[0].UntilMs != 0 || got[0].Resumed || !got[0].Current() {
					t.Errorf("scope %s from the snapshot: %+v, want one entry that names it", s, got)
				}
			}
			if got := h.resetsSoFar(); len(got) != 1 || !got[0] {
				t.Errorf("resets %v, want [true] (live from the snapshot)", got)
			}
			later := []Entry{
				{Key: k("b"), UntilMs: now + 5000, NowMs: now},
				{Key: k("b")},
				{Key: k("b"), Resumed: true},
			}
			for _, en := range later {
				if err := Append(ctx, e.Rdb, e.Prefix, en); err != nil {
					t.Fatal(err)
				}
			}
			redistest.Eventually(t, 5*time.Second, "the log's entries heard", func() bool { return len(h.of(k("b"))) == len(later) })
			for i, got := range h.of(k("b")) {
				want := later[i]
				want.Version = schema.FeedVersion
				if got != want {
					t.Errorf("entry %d: %+v, want %+v", i, got, want)
				}
			}
			if r.Snapshots() != 1 {
				t.Errorf("%d snapshots, want 1", r.Snapshots())
			}
		})
	}
}

// TestSnapshotKeepsTheLatest: the snapshot holds a scope's latest
// deadline, loses it on a resume, drops what has passed, and expires at
// its last deadline.
func TestSnapshotKeepsTheLatest(t *testing.T) {
	c, rdb := redistest.StartMini(t, redistest.T0)
	ctx := context.Background()
	now := c.Now.UnixMilli()
	k := schema.ScopeKeys("qg", "ups", "a").Pause
	_, snap, _ := schema.FeedKeys("qg", schema.FeedGroup(k, Groups(rdb)))
	score := func() float64 {
		s, err := rdb.ZScore(ctx, snap, k).Result()
		if err == redis.Nil {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	steps := []struct {
		e    Entry
		want float64
	}{
		{Entry{Key: k, UntilMs: now + 2000, NowMs: now}, float64(now + 2000)},
		{Entry{Key: k, UntilMs: now + 1000, NowMs: now}, float64(now + 2000)},
		{Entry{Key: k}, float64(now + 2000)},
		{Entry{Key: k, UntilMs: now + 3000, NowMs: now}, float64(now + 3000)},
		{Entry{Key: k, Resumed: true}, 0},
		{Entry{Key: k, UntilMs: now + 500, NowMs: now}, float64(now + 500)},
	}
	for i, s := range steps {
		if err := Append(ctx, rdb, "qg", s.e); err != nil {
			t.Fatal(err)
		}
		if got := score(); got != s.want {
			t.Errorf("step %d (%+v): snapshot score %v, want %v", i, s.e, got, s.want)
		}
		if ttl := c.MR.TTL(snap); s.want > 0 && ttl != time.Duration(s.want-float64(now))*time.Millisecond {
			t.Errorf("step %d: the snapshot expires in %v, want at its last deadline", i, ttl)
		}
	}
	c.Advance(time.Second) // past the last deadline: the group's next append drops it
	if err := Append(ctx, rdb, "qg", Entry{Key: k}); err != nil {
		t.Fatal(err)
	}
	if got := score(); got != 0 {
		t.Errorf("a deadline passed stays in the snapshot: %v", got)
	}
}

// TestAsksNameEveryScope: every entry scores its scope in the group's
// asks at the entry's Redis TIME, a resume too; the asks drop a scope
// AskRetain after its last entry, and expire AskRetain after the last.
func TestAsksNameEveryScope(t *testing.T) {
	c, rdb := redistest.StartMini(t, redistest.T0)
	ctx := context.Background()
	k := func(s string) string { return schema.ScopeKeys("qg", "ups", s).Pause }
	_, _, asks := schema.FeedKeys("qg", 0)
	score := func(k string) int64 {
		s, err := rdb.ZScore(ctx, asks, k).Result()
		if err == redis.Nil {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		return int64(s)
	}
	t0 := c.Now.UnixMilli()
	for _, en := range []Entry{{Key: k("a"), UntilMs: t0 + 2000, NowMs: t0}, {Key: k("b")}, {Key: k("c"), Resumed: true}} {
		if err := Append(ctx, rdb, "qg", en); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []string{"a", "b", "c"} {
		if got := score(k(s)); got != t0 {
			t.Errorf("scope %s asked at %d, want %d", s, got, t0)
		}
	}
	c.Advance(AskRetain - time.Second)
	if err := Append(ctx, rdb, "qg", Entry{Key: k("b")}); err != nil {
		t.Fatal(err)
	}
	if got, want := score(k("b")), c.Now.UnixMilli(); got != want {
		t.Errorf("scope b asked again at %d, want %d", got, want)
	}
	c.Advance(2 * time.Second)
	if err := Append(ctx, rdb, "qg", Entry{Key: k("b")}); err != nil {
		t.Fatal(err)
	}
	if got := score(k("a")) + score(k("c")); got != 0 {
		t.Errorf("scopes named AskRetain ago still asked (%d)", got)
	}
	if ttl := c.MR.TTL(asks); ttl != AskRetain {
		t.Errorf("the asks expire in %v, want AskRetain", ttl)
	}
}

// TestStaleAndBack: a reader whose Redis goes away goes stale (Reset
// false, not Fresh) and, once Redis is back, loads the snapshot again and
// is live, having heard a pause recorded while it was away.
func TestStaleAndBack(t *testing.T) {
	srv := redistest.StartPrivate(t)
	rdb := srv.Client(t)
	prefix := srv.Prefix(t)
	var h heardLog
	r := NewReader(h.config(rdb, prefix))
	r.Start()
	defer r.Close()
	redistest.Eventually(t, 5*time.Second, "the reader live", r.Fresh)
	srv.Kill(t)
	redistest.Eventually(t, 5*time.Second, "the reader stale", func() bool { return !r.Fresh() && len(h.resetsSoFar()) >= 2 })
	if r.Lag() != -1 {
		t.Errorf("a stale reader's lag %v, want -1", r.Lag())
	}
	srv.Restart(t)
	k := schema.ScopeKeys(prefix, "ups", "a").Pause
	now := redisMs(t, rdb)
	if err := Append(context.Background(), rdb, prefix, Entry{Key: k, UntilMs: now + 60_000, NowMs: now}); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, 10*time.Second, "the reader live again, the pause recorded during the gap heard", func() bool {
		return r.Fresh() && slices.ContainsFunc(h.of(k), func(e Entry) bool { return e.UntilMs == now+60_000 })
	})
	if got := h.resetsSoFar(); len(got) < 3 || got[0] != true || got[1] != false || got[len(got)-1] != true {
		t.Errorf("resets %v, want true, false, …, true", got)
	}
	if r.Snapshots() < 2 {
		t.Errorf("%d snapshots, want one at start and one after the gap", r.Snapshots())
	}
}

// TestEncodeDecode: entries decode as they were encoded, one after
// another, whatever bytes the key holds; an entry of another format gives
// its key and version; bytes that are not whole entries are errFraming,
// with the entries before them.
func TestEncodeDecode(t *testing.T) {
	es := []Entry{
		{Key: "qg:{ups:a}:pause", UntilMs: 1700000015000, NowMs: 1700000000000, Version: schema.FeedVersion},
		{Key: "qg:{ups:a b\n 7 x}:pause", Resumed: true, Version: schema.FeedVersion},
		{Key: "qg:{ups:c}:pause", Version: schema.FeedVersion},
	}
	var b string
	for _, e := range es {
		b += encode(e)
	}
	got, err := decode(b)
	if err != nil || !slices.Equal(got, es) {
		t.Errorf("decode(encode(...)) = %+v, %v; want %+v", got, err, es)
	}
	future := "2 16 qg:{ups:d}:pause whatever the format says\n"
	got, err = decode(future + encode(es[0]))
	if err != nil || len(got) != 2 || got[0] != (Entry{Key: "qg:{ups:d}:pause", Version: 2}) || got[1] != es[0] {
		t.Errorf("an entry of another format: %+v, %v", got, err)
	}
	for _, bad := range []string{
		encode(es[0])[5:],               // read from inside an entry
		"1 16 qg:{ups:a}:pause 5 6\n",   // a payload short of a field
		"1 99 qg:{ups:a}:pause 5 6 0\n", // a key longer than the bytes
		"1 16 qg:{ups:a}:pause 5 6 0",   // no end
		"1 16 qg:{ups:a}:pause 5 6 2\n", // resumed neither 0 nor 1
	} {
		got, err := decode(encode(es[2]) + bad)
		if !errors.Is(err, errFraming) || len(got) != 1 || got[0] != es[2] {
			t.Errorf("decode(... %q) = %+v, %v; want the entry before it and errFraming", bad, got, err)
		}
	}
}

// TestResyncReloads: a reader told to resync (its store recovered: a
// master may have changed) goes stale and loads the snapshot again at
// once, and hears what is appended after.
func TestResyncReloads(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	prefix := srv.Prefix(t)
	k := schema.ScopeKeys(prefix, "ups", "a").Pause
	var h heardLog
	r := NewReader(h.config(rdb, prefix))
	r.Start()
	defer r.Close()
	redistest.Eventually(t, 5*time.Second, "the reader live", r.Fresh)
	r.Resync()
	redistest.Eventually(t, 5*time.Second, "the snapshot loaded again", func() bool { return r.Snapshots() >= 2 && r.Fresh() })
	if got := h.resetsSoFar(); len(got) < 3 || !got[0] || got[1] || !got[2] {
		t.Errorf("resets %v, want true, false, true", got)
	}
	now := redisMs(t, rdb)
	if err := Append(context.Background(), rdb, prefix, Entry{Key: k, UntilMs: now + 60_000, NowMs: now}); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, 5*time.Second, "the entry appended after heard", func() bool { return len(h.of(k)) == 1 })
}

// TestEntryOf: a log's message holds one whole entry in its field e, or
// nothing the reader hears.
func TestEntryOf(t *testing.T) {
	e := Entry{Key: "qg:{ups:a}:pause", UntilMs: 5, NowMs: 4, Version: schema.FeedVersion}
	for _, c := range []struct {
		values map[string]any
		ok     bool
	}{
		{map[string]any{"e": encode(e)}, true},
		{map[string]any{"e": encode(e) + encode(e)}, false},
		{map[string]any{"k": "qg:{ups:a}:pause"}, false},
		{map[string]any{"e": "garbage"}, false},
	} {
		got, ok := entryOf(redis.XMessage{Values: c.values})
		if ok != c.ok || ok && got != e {
			t.Errorf("entryOf(%v) = %+v, %v; want %v", c.values, got, ok, c.ok)
		}
	}
}

// TestSettleAfterGap: a reader's first snapshot is trusted at once; one
// that ends a gap (a round that failed: here Redis went away and came
// back), or that Resync asked for, is not, until Config.Settle passed on
// the reader's clock, however many polls succeed meanwhile: a pause whose
// entry the gap lost is announced again by its writer within that time.
func TestSettleAfterGap(t *testing.T) {
	srv := redistest.StartPrivate(t)
	rdb := srv.Client(t)
	var h heardLog
	cfg := h.config(rdb, srv.Prefix(t))
	var mu sync.Mutex
	clock := time.Unix(1_700_000_000, 0)
	cfg.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	cfg.Settle = 10 * time.Second // under Retain/2: moving the clock by it is no gap
	r := NewReader(cfg)
	r.Start()
	defer r.Close()
	redistest.Eventually(t, 5*time.Second, "the reader fresh after its first snapshot", r.Fresh)
	srv.Kill(t)
	redistest.Eventually(t, 5*time.Second, "the reader stale", func() bool { return !r.Fresh() && len(h.resetsSoFar()) >= 2 })
	srv.Restart(t)
	settles := func(after string) {
		t.Helper()
		time.Sleep(5 * cfg.Interval) // polls go on; the clock does not move
		if r.Fresh() {
			t.Fatalf("fresh right after the snapshot %s, before Settle", after)
		}
		mu.Lock()
		clock = clock.Add(cfg.Settle)
		mu.Unlock()
		redistest.Eventually(t, 5*time.Second, "fresh once Settle passed after the snapshot "+after, r.Fresh)
	}
	redistest.Eventually(t, 10*time.Second, "the snapshot loaded again", func() bool { return r.Snapshots() >= 2 && r.Lag() == 0 })
	settles("that ended a gap")
	n := r.Snapshots()
	r.Resync()
	redistest.Eventually(t, 5*time.Second, "the snapshot of a Resync loaded", func() bool { return r.Snapshots() > n && r.Lag() == 0 })
	settles("a Resync asked for")
}
