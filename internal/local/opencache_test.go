package local

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/schema"
)

// TestOpenCacheTrustSteps: the rules of the proof of life, step by step, on
// a cache without Redis (its feed taken as fresh).
func TestOpenCacheTrustSteps(t *testing.T) {
	const trust = 250 * time.Millisecond
	type step struct {
		advance   time.Duration
		do        string // "remember", "answer" (a call started now is answered at the end of the step), "fail", "late" (a call started before the last failure is answered)
		fresh     bool   // fail closed
		freshOpen bool   // fail open
	}
	for i, steps := range [][]step{
		{ // an admission's round trip proves life: trusted within trust of its start
			{do: "answer"}, {do: "remember", fresh: true, freshOpen: true},
			{advance: trust - time.Millisecond, fresh: true, freshOpen: true},
			{advance: time.Millisecond, fresh: false, freshOpen: true},
			{do: "answer", fresh: true, freshOpen: true}, // any answer renews the proof
		},
		{ // a failure forgets everything, and an older call's answer does not renew
			{do: "answer"}, {do: "remember", fresh: true, freshOpen: true},
			{do: "fail", fresh: false, freshOpen: true},
			{do: "late", fresh: false, freshOpen: true},
			{do: "answer", fresh: false, freshOpen: true}, // forgotten: a new round trip must remember it
			{do: "remember", fresh: true, freshOpen: true},
		},
	} {
		now := time.Unix(1_700_000_000, 0)
		clock := func() time.Time { return now }
		caches := [2]*OpenCache{
			NewOpenCache(freshFeed{}, time.Hour, trust, clock), // fail closed
			NewOpenCache(freshFeed{}, time.Hour, 0, clock),     // fail open
		}
		var late [2]func(error)
		for _, c := range caches {
			c.Reset(true)
		}
		for j, s := range steps {
			now = now.Add(s.advance)
			for n, c := range caches {
				switch s.do {
				case "remember":
					c.Remember("k", c.gen)
				case "answer":
					c.Track()(nil)
				case "fail":
					late[n] = c.Track()
					c.Track()(errors.New("i/o timeout"))
				case "late":
					late[n](nil)
				}
			}
			if got := caches[0].Fresh("k", false); got != s.fresh {
				t.Errorf("case %d step %d (%s): fail closed fresh = %v, want %v", i, j, s.do, got, s.fresh)
			}
			if got := caches[1].Fresh("k", false); got != s.freshOpen {
				t.Errorf("case %d step %d (%s): fail open fresh = %v, want %v", i, j, s.do, got, s.freshOpen)
			}
		}
	}
}

// freshFeed is a feed always fresh.
type freshFeed struct{}

func (freshFeed) Start()      {}
func (freshFeed) Fresh() bool { return true }

// TestOpenCacheFeed: an entry is trusted only while the cache is live and
// its feed fresh; a reset forgets every entry, and an entry heard between
// a round trip and its Remember keeps the scope out.
func TestOpenCacheFeed(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	f := &switchFeed{fresh: true}
	c := NewOpenCache(f, time.Hour, 0, func() time.Time { return now })
	c.Remember("k", c.Begin())
	if c.Fresh("k", false) {
		t.Error("trusted before the feed caught up")
	}
	if !f.started {
		t.Error("Begin did not start the feed")
	}
	c.Reset(true)
	c.Remember("k", c.Begin())
	if !c.Fresh("k", false) {
		t.Error("not trusted with the feed caught up and fresh")
	}
	f.fresh = false
	if c.Fresh("k", false) {
		t.Error("trusted with the feed late")
	}
	f.fresh = true
	gen := c.Begin()
	c.Ask("other") // an entry heard during the round trip
	c.Remember("j", gen)
	if c.Fresh("j", false) {
		t.Error("remembered across an entry heard during its round trip")
	}
	c.Reset(false)
	c.Reset(true)
	if c.Fresh("k", false) {
		t.Error("an entry outlived the feed's gap")
	}
	c.Close()
	c.Reset(true)
	c.Remember("k", c.Begin())
	if c.Fresh("k", false) {
		t.Error("trusted after Close")
	}
}

// The cache drops entries older than maxAge once it holds pruneAt, and
// then only when its entries have doubled: many scopes, all seen within
// maxAge, cost a scan of the map per doubling, and the map holds at most
// twice the entries still trusted.
func TestOpenCachePrune(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	c := NewOpenCache(&switchFeed{fresh: true}, time.Minute, 0, func() time.Time { return now })
	c.Reset(true)
	for i := range pruneAt - 1 {
		c.Remember(strconv.Itoa(i), c.Begin())
	}
	now = now.Add(time.Minute) // every entry so far is now too old
	c.Remember("a", c.Begin())
	if len(c.seen) != pruneAt {
		t.Fatalf("%d entries before the first prune, want %d", len(c.seen), pruneAt)
	}
	c.Remember("b", c.Begin()) // pruneAt entries: the first prune drops the old ones
	if len(c.seen) != 2 || !c.Fresh("a", false) || !c.Fresh("b", false) {
		t.Fatalf("after the first prune: %d entries, a %v, b %v; want the 2 fresh", len(c.seen), c.Fresh("a", false), c.Fresh("b", false))
	}
	for i := range 3 * pruneAt { // all fresh: the map grows, pruned once per doubling
		c.Remember("f"+strconv.Itoa(i), c.Begin())
	}
	if want := 3*pruneAt + 2; len(c.seen) != want {
		t.Fatalf("%d entries, want the %d fresh ones", len(c.seen), want)
	}
	if c.pruneNext < len(c.seen) {
		t.Fatalf("the next prune at %d entries, below the %d held: every Remember would scan the map", c.pruneNext, len(c.seen))
	}
}

// switchFeed is a feed whose freshness the test sets.
type switchFeed struct{ fresh, started bool }

func (f *switchFeed) Start()      { f.started = true }
func (f *switchFeed) Fresh() bool { return f.fresh }

// TestOpenCacheAsks: a scope never seen is admitted when the gate lets
// such scopes in (unseen) unless it is an ask; an ask holds until a round
// trip remembers it open; a snapshot caught up keeps the asks it brought,
// a stale feed forgets them with everything; asks older than
// schema.AskRetain are pruned.
func TestOpenCacheAsks(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	c := NewOpenCache(&switchFeed{fresh: true}, time.Hour, 0, func() time.Time { return now })
	if c.Fresh("k", true) {
		t.Error("an unseen scope admitted before the feed caught up")
	}
	c.Ask("k") // a snapshot's scope, heard before it is live
	c.Reset(true)
	if !c.Fresh("j", true) || c.Fresh("j", false) {
		t.Error("a scope never seen: want admitted only when unseen scopes are")
	}
	if c.Fresh("k", true) {
		t.Error("the snapshot's ask admitted without a round trip")
	}
	c.Remember("k", c.Begin())
	if !c.Fresh("k", true) || !c.Fresh("k", false) {
		t.Error("an ask a round trip saw open: want admitted")
	}
	c.Ask("k") // an entry names it again
	if c.Fresh("k", true) {
		t.Error("an ask named again admitted without a round trip")
	}
	c.Reset(false)
	if c.Fresh("j", true) {
		t.Error("admitted with the feed stale")
	}
	c.Reset(true)
	if !c.Fresh("k", true) {
		t.Error("an ask outlived the feed's gap (the snapshot names what must ask)")
	}
	for i := range pruneAt {
		c.Ask(strconv.Itoa(i))
	}
	now = now.Add(schema.AskRetain)
	c.Ask("a") // past pruneAt entries, all older than schema.AskRetain: pruned
	if len(c.asks) != 1 || c.Fresh("a", true) || !c.Fresh("0", true) {
		t.Errorf("after the prune: %d asks, want only the new one", len(c.asks))
	}
}
