package local

import (
	"sync"
	"time"
)

// OpenCache lets a gate admit a task without a round trip when it has seen
// the task's scope open and the scope has no limit: the common case, where
// a round trip per task would cost a third of asynq's own throughput.
//
// It is safe because every change that can close a scope is announced on
// the feed (internal/feed: a pause, a resume, a budget gained), and the
// gate forgets a scope as soon as its process reads the entry (the gate
// that records a pause forgets it at once). An entry is trusted only
//
//   - while the feed is fresh (Feed.Fresh: caught up, its last poll
//     within two intervals), and the cache live: a feed that goes stale
//     makes the gate forget everything (Reset(false)), and nothing is
//     remembered again until the feed caught up from a snapshot
//     (Reset(true)), so no entry can be missed unnoticed;
//   - if no entry arrived between the round trip that saw the scope open
//     and the moment it is remembered (a generation counter);
//   - for at most maxAge (Tuning.OpenCache), which bounds how long a
//     pause recorded by a process that died before it announced it goes
//     unheard when no refusal follows (a provider's refusal of a request
//     sent into it announces it again), and how long a process admits a
//     scope without reading its records back.
//
// The staleness in the normal case is the feed's poll interval.
//
// A fail-closed gate (Config.FailClosed) promises to admit nothing the
// store cannot vouch for, and a hung Redis (or a silent network) fails no
// call at once: it just stops answering. So with FailClosed an entry is
// also trusted only
//
//   - within trustFor (Config.StoreTimeout) of the start of the last store
//     call Redis answered: the proof of life is never older than the
//     longest a round trip may take, so the cache admits nothing a round
//     trip made at the same moment could not have admitted, give or take
//     one bound. A busy gate keeps it fresh at the cost of at most one
//     round trip per StoreTimeout (4 per second by default) for all its
//     cached scopes: when the proof is too old, the next admission makes
//     the round trip that renews it.
//   - if no store call has failed since that answer: any failed or
//     abandoned call (a timeout, a refused connection, the abandoned-calls
//     cap) forgets every entry at once, so from the first failure on every
//     admission asks Redis, and fails closed, until Redis answers again.
//
// A fail-open gate keeps neither rule: when the store fails it admits
// anyway, so the cache changes nothing but the cost.
type OpenCache struct {
	feed     Feed
	maxAge   time.Duration
	trustFor time.Duration // FailClosed: the proof of life's lifetime; 0: no proof needed
	now      func() time.Time

	mu        sync.Mutex
	live      bool                 // the feed caught up, and has not gone stale since
	gen       uint64               // bumped by every entry heard, reset and store failure
	seen      map[string]time.Time // pause key → when seen open
	pruneNext int                  // len(seen) at which Remember next drops old entries (0: pruneAt)
	alive     time.Time            // start of the last call Redis answered, with no failure since (trustFor > 0)
	fails     uint64               // store failures seen (trustFor > 0)
	closed    bool
}

// Feed is what the cache needs of the gate's feed (internal/feed's
// Reader): started on first use, and whether it is fresh.
type Feed interface {
	Start()
	Fresh() bool
}

// NewOpenCache returns the open cache of a gate whose feed is feed:
// entries trusted for maxAge (Tuning.OpenCache, defaults applied; 0 or
// less: none), and, when trustFor is positive (a fail-closed gate's
// Config.StoreTimeout), within trustFor of the proof of life. The feed
// tells it what it hears (Forget) and when it goes stale or catches up
// (Reset).
func NewOpenCache(feed Feed, maxAge, trustFor time.Duration, now func() time.Time) *OpenCache {
	return &OpenCache{feed: feed, maxAge: maxAge, trustFor: trustFor, now: now}
}

// pruneAt is how many entries the cache holds before it first drops
// those older than maxAge; after each prune the next comes when the
// entries have doubled (OpenCache.pruneNext), so a cache of many scopes
// seen within maxAge scans its map once per doubling, not per entry, and
// holds at most twice the entries still trusted (or pruneAt).
const pruneAt = 4096

// Fresh reports whether the scope of pause key k was seen open recently
// enough to admit without a round trip.
func (c *OpenCache) Fresh(k string) bool {
	if c.maxAge <= 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.seen[k]
	now := c.now()
	return ok && c.live && now.Sub(at) < c.maxAge && (c.trustFor <= 0 || now.Sub(c.alive) < c.trustFor) && c.feed.Fresh()
}

// ignoreEnd is the end of a call that Track does not follow.
func ignoreEnd(error) {}

// Track follows one store call (store.Hooks.Track): called as the call
// starts, it returns the function that hears how it ended. With trustFor
// set, an answer proves Redis alive as of the call's start, unless a
// failure was seen meanwhile (a late answer to an older call proves
// nothing about now); a failure forgets every entry and the proof.
func (c *OpenCache) Track() func(error) {
	if c.trustFor <= 0 {
		return ignoreEnd
	}
	c.mu.Lock()
	began, fails := c.now(), c.fails
	c.mu.Unlock()
	return func(err error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if err != nil {
			c.fails++
			c.gen++
			c.alive = time.Time{}
			clear(c.seen)
			return
		}
		if c.fails == fails && began.After(c.alive) {
			c.alive = began
		}
	}
}

// Begin starts the feed on first use and returns the generation to pass
// to Remember after the round trip.
func (c *OpenCache) Begin() uint64 {
	if c.maxAge <= 0 {
		return 0
	}
	c.feed.Start()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// Remember records that k was seen open by a round trip that began at
// generation gen.
func (c *OpenCache) Remember(k string, gen uint64) {
	if c.maxAge <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.live || c.gen != gen {
		return
	}
	now := c.now()
	if len(c.seen) >= max(c.pruneNext, pruneAt) {
		for k, at := range c.seen {
			if now.Sub(at) >= c.maxAge {
				delete(c.seen, k)
			}
		}
		c.pruneNext = 2 * len(c.seen)
	}
	if c.seen == nil {
		c.seen = make(map[string]time.Time)
	}
	c.seen[k] = now
}

// Live reports whether the cache is live: the feed caught up, and has
// not gone stale since.
func (c *OpenCache) Live() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live
}

// Forget drops k: an entry of its scope was heard.
func (c *OpenCache) Forget(k string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	delete(c.seen, k)
}

// Reset forgets everything: the feed went stale (live false: nothing is
// remembered until it catches up) or caught up from a snapshot (live).
func (c *OpenCache) Reset(live bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.live = live && !c.closed
	clear(c.seen)
}

// Close forgets everything for good: the gate goes on with a round trip
// per task.
func (c *OpenCache) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed, c.live = true, false
	clear(c.seen)
}
