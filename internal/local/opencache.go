package local

import (
	"sync"
	"time"

	"github.com/quotagate/quotagate/internal/schema"
)

// OpenCache lets a gate admit a task without a round trip when its scope
// has no limit and nothing but a pause can stop it: the common case,
// where a round trip per task would cost a third of asynq's own
// throughput.
//
// It rests on one rule: every change that can close a scope is announced
// on the feed (internal/feed: a pause, a resume, a budget gained), and
// the feed's snapshot names every scope an entry named within
// feed.AskRetain. So the cache keeps the scopes that must ask Redis (the
// asks): each scope an entry of the feed names, or the snapshot does, or
// this gate changes (Ask), until a round trip of this process sees it
// open again (Remember). A scope the cache does not hold as an ask is
//
//   - open, if a round trip of this process saw it open within maxAge
//     (Tuning.OpenCache; the seen);
//   - open too, if the gate lets a scope it never asked about in (Fresh's
//     unseen: a gate that observes no responses, which sends no first
//     contact's probe; one that does asks, since the probe and the slow
//     start that follows are spent in Redis);
//   - to be asked about otherwise.
//
// An entry is trusted only
//
//   - while the feed is fresh (Feed.Fresh: caught up, its last poll
//     within two intervals), and the cache live: a feed that goes stale
//     makes the gate forget everything (Reset(false)), and nothing is
//     trusted again until the feed caught up from a snapshot
//     (Reset(true)), whose scopes it heard as asks, so no entry can be
//     missed unnoticed;
//   - if no entry arrived between the round trip that saw the scope open
//     and the moment it is remembered (a generation counter).
//
// maxAge bounds how long a seen scope is admitted without reading its
// records back, and how long a pause recorded by a process that died
// before it announced it goes unheard by a gate that saw the scope open
// when no refusal follows (a provider's refusal of a request sent into
// it announces it again). A scope never asked about has no such bound:
// such a pause goes unheard by a gate that lets it in until a refusal.
//
// The staleness in the normal case is the feed's poll interval.
//
// A fail-closed gate (Config.FailClosed) promises to admit nothing the
// store cannot vouch for, and a hung Redis (or a silent network) fails no
// call at once: it just stops answering. So with FailClosed the cache
// admits nothing unless also
//
//   - within trustFor (Config.StoreTimeout) of the start of the last store
//     call Redis answered: the proof of life is never older than the
//     longest a round trip may take, so the cache admits nothing a round
//     trip made at the same moment could not have admitted, give or take
//     one bound. A busy gate keeps it fresh at the cost of at most one
//     round trip per StoreTimeout (4 per second by default) for all its
//     scopes: when the proof is too old, the next admission makes the
//     round trip that renews it.
//   - no store call has failed since that answer: any failed or abandoned
//     call (a timeout, a refused connection, the abandoned-calls cap)
//     forgets every seen scope at once, so from the first failure on
//     every admission asks Redis, and fails closed, until Redis answers
//     again.
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
	seen      map[string]time.Time // pause key → when a round trip saw it open
	asks      map[string]time.Time // pause key → when it was named: it must ask Redis
	pruneNext int                  // len(seen) + len(asks) at which the next prune drops old entries (0: pruneAt)
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
// tells it what it hears (Ask) and when it goes stale or catches up
// (Reset).
func NewOpenCache(feed Feed, maxAge, trustFor time.Duration, now func() time.Time) *OpenCache {
	return &OpenCache{feed: feed, maxAge: maxAge, trustFor: trustFor, now: now}
}

// pruneAt is how many entries the cache holds before it first drops
// those past their age (maxAge for the seen, schema.AskRetain for the
// asks, as long as the feed's snapshot names them); after
// each prune the next comes when the entries have doubled
// (OpenCache.pruneNext), so a cache of many scopes scans its maps once
// per doubling, not per entry, and holds at most twice the entries still
// in force (or pruneAt).
const pruneAt = 4096

// Fresh reports whether the scope of pause key k may be admitted without
// a round trip: it is not an ask, and a round trip saw it open within
// maxAge, or the gate lets scopes it never asked about in (unseen).
func (c *OpenCache) Fresh(k string, unseen bool) bool {
	if c.maxAge <= 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if !c.live || (c.trustFor > 0 && now.Sub(c.alive) >= c.trustFor) || !c.feed.Fresh() {
		return false
	}
	if _, ask := c.asks[k]; ask {
		return false
	}
	at, ok := c.seen[k]
	return unseen || ok && now.Sub(at) < c.maxAge
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
// generation gen: it is no longer an ask.
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
	c.prune(now)
	if c.seen == nil {
		c.seen = make(map[string]time.Time)
	}
	delete(c.asks, k)
	c.seen[k] = now
}

// prune drops the entries past their age, once the cache holds as many
// as pruneNext (see pruneAt).
func (c *OpenCache) prune(now time.Time) {
	if len(c.seen)+len(c.asks) < max(c.pruneNext, pruneAt) {
		return
	}
	for k, at := range c.seen {
		if now.Sub(at) >= c.maxAge {
			delete(c.seen, k)
		}
	}
	for k, at := range c.asks {
		if now.Sub(at) >= schema.AskRetain { // past it, a process that starts would not ask either
			delete(c.asks, k)
		}
	}
	c.pruneNext = 2 * (len(c.seen) + len(c.asks))
}

// Live reports whether the cache is live: the feed caught up, and has
// not gone stale since.
func (c *OpenCache) Live() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live
}

// Ask holds k as an ask: an entry of its scope was heard, or this gate
// changes the scope. Its admissions ask Redis until a round trip sees it
// open.
func (c *OpenCache) Ask(k string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	delete(c.seen, k)
	if c.closed {
		return
	}
	now := c.now()
	c.prune(now)
	if c.asks == nil {
		c.asks = make(map[string]time.Time)
	}
	c.asks[k] = now
}

// Reset follows the feed: gone stale (live false), the cache forgets
// everything and admits nothing; caught up from a snapshot (live), it
// keeps the asks, which hold the snapshot's scopes, heard first, and
// forgets the seen scopes, since an entry of the gap may have named them.
func (c *OpenCache) Reset(live bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.live = live && !c.closed
	clear(c.seen)
	if !c.live {
		clear(c.asks)
	}
}

// Close forgets everything for good: the gate goes on with a round trip
// per task.
func (c *OpenCache) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed, c.live = true, false
	clear(c.seen)
	clear(c.asks)
}
