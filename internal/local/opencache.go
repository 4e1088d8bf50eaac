package local

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/quotagate/quotagate/internal/failover"

	"github.com/redis/go-redis/v9"
)

// OpenCache lets a gate admit a task without a round trip when it has just
// seen the task's scope open and the scope has no limit: the common case,
// where a round trip per task would cost a third of asynq's own throughput.
//
// It is safe because every pause is announced: the pause script publishes
// the scope's pause key on the gate's channel, and a subscriber forgets a
// scope as soon as its announcement arrives (the gate that records a pause
// forgets it at once). An entry is trusted only
//
//   - while the subscription is live: any subscription error forgets
//     everything, and nothing is remembered again until Redis confirms the
//     (re)subscription, so no announcement can be missed unnoticed;
//   - if no announcement arrived between the round trip that saw the scope
//     open and the moment it is remembered (a generation counter);
//   - for at most maxAge (Tuning.OpenCache), which bounds how stale it can
//     be if the subscription's connection dies silently.
//
// The staleness in the normal case is the delivery delay of one Redis
// message, the same order as the round trip it saves.
//
// A fail-closed gate (Config.FailClosed) promises to admit nothing the
// store cannot vouch for, and a hung Redis (or a silent network) breaks no
// subscription: it just stops answering. So with FailClosed an entry is
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
	rdb      redis.UniversalClient
	channel  string
	maxAge   time.Duration
	trustFor time.Duration // FailClosed: the proof of life's lifetime; 0: no proof needed
	now      func() time.Time

	mu      sync.Mutex
	live    bool                 // subscribed, no error since
	gen     uint64               // bumped by every announcement, subscription change and store failure
	seen    map[string]time.Time // pause key → when seen open
	alive   time.Time            // start of the last call Redis answered, with no failure since (trustFor > 0)
	fails   uint64               // store failures seen (trustFor > 0)
	started bool                 // the watcher runs
	ps      *redis.PubSub        // the watcher's subscription, once made
	closed  bool

	// Set by the gate before first use (newGate: Heard and Resubscribed
	// feed its memory of the pauses, internal/failover, and Failed
	// internal/store's topology.go): Heard takes every announcement's
	// payload, Resubscribed is called when the subscription is confirmed
	// again after an error (the master may have changed), Failed hears
	// the subscription's errors.
	Heard        func(payload string)
	Resubscribed func()
	Failed       func(error)
}

// NewOpenCache returns the open cache of a gate, announcements arriving
// on channel: entries trusted for maxAge (Tuning.OpenCache, defaults
// applied; 0 or less: none), and, when trustFor is positive (a fail-closed
// gate's Config.StoreTimeout), within trustFor of the proof of life.
func NewOpenCache(rdb redis.UniversalClient, channel string, maxAge, trustFor time.Duration, now func() time.Time) *OpenCache {
	return &OpenCache{rdb: rdb, channel: channel, maxAge: maxAge, trustFor: trustFor, now: now}
}

// pruneAt is how many entries the cache holds before it drops old ones.
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
	return ok && c.live && now.Sub(at) < c.maxAge && (c.trustFor <= 0 || now.Sub(c.alive) < c.trustFor)
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

// Begin starts the subscription on first use and returns the generation to
// pass to Remember after the round trip.
func (c *OpenCache) Begin() uint64 {
	if c.maxAge <= 0 {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.started && !c.closed {
		c.started = true
		go c.watch()
	}
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
	if len(c.seen) >= pruneAt {
		for k, at := range c.seen {
			if now.Sub(at) >= c.maxAge {
				delete(c.seen, k)
			}
		}
	}
	if c.seen == nil {
		c.seen = make(map[string]time.Time)
	}
	c.seen[k] = now
}

// Live reports whether the subscription is live: confirmed by Redis, no
// error since.
func (c *OpenCache) Live() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live
}

// Forget drops k: a pause of its scope was announced.
func (c *OpenCache) Forget(k string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	delete(c.seen, k)
}

// reset forgets everything: the subscription changed.
func (c *OpenCache) reset(live bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.live = live
	clear(c.seen)
}

// watch subscribes and follows the announcements until close, or until the
// client is closed (a gate never closed must not leave its watcher behind).
// Subscribing may block on an unresponsive Redis: it happens here, never
// under the lock or on a task's path.
func (c *OpenCache) watch() {
	ctx := context.Background()
	ps := c.rdb.Subscribe(ctx, c.channel)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		ps.Close()
		return
	}
	c.ps = ps
	c.mu.Unlock()
	backoff := 10 * time.Millisecond
	broken := false // an error since the last confirmed subscription
	for {
		msg, err := ps.Receive(ctx)
		c.mu.Lock()
		closed := c.closed
		c.mu.Unlock()
		if closed {
			return
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			c.reset(m.Kind == "subscribe")
			backoff = 10 * time.Millisecond
			if m.Kind == "subscribe" && broken && c.Resubscribed != nil {
				c.Resubscribed()
			}
			broken = false
		case *redis.Message:
			c.Forget(failover.ParseAnnouncement(m.Payload).Key)
			if c.Heard != nil {
				c.Heard(m.Payload)
			}
		}
		if err != nil && !errors.Is(err, redis.ErrClosed) {
			broken = true
			if c.Failed != nil {
				c.Failed(err)
			}
		}
		if errors.Is(err, redis.ErrClosed) { // the client is closed: nothing to follow any more
			c.reset(false)
			ps.Close()
			return
		}
		if err != nil {
			c.reset(false)
			time.Sleep(backoff) // go-redis reconnects and resubscribes on the next Receive
			backoff = min(2*backoff, time.Second)
		}
	}
}

// Close ends the subscription; the gate goes on with a round trip per task.
func (c *OpenCache) Close() error {
	c.mu.Lock()
	ps := c.ps
	c.closed, c.live, c.ps = true, false, nil
	clear(c.seen)
	c.mu.Unlock()
	if ps == nil {
		return nil
	}
	return ps.Close()
}
