package quotagate

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/quotagate/quotagate/internal/failover"

	"github.com/redis/go-redis/v9"
)

// openCache lets a gate admit a task without a round trip when it has just
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
type openCache struct {
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

	// Set by the gate before first use (newGate: heard and resubscribed
	// feed its memory of the pauses, internal/failover, and failed
	// internal/store's topology.go): heard takes every announcement's
	// payload, resubscribed is called when the subscription is confirmed
	// again after an error (the master may have changed), failed hears
	// the subscription's errors.
	heard        func(payload string)
	resubscribed func()
	failed       func(error)
}

// newOpenCache returns the open cache of a gate with configuration cfg
// (defaults applied), announcements arriving on channel.
func newOpenCache(rdb redis.UniversalClient, channel string, cfg Config, now func() time.Time) *openCache {
	c := &openCache{rdb: rdb, channel: channel, maxAge: cfg.Tuning.OpenCache, now: now}
	if cfg.FailClosed {
		c.trustFor = cfg.StoreTimeout
	}
	return c
}

// pruneAt is how many entries the cache holds before it drops old ones.
const pruneAt = 4096

// fresh reports whether the scope of pause key k was seen open recently
// enough to admit without a round trip.
func (c *openCache) fresh(k string) bool {
	if c.maxAge <= 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.seen[k]
	now := c.now()
	return ok && c.live && now.Sub(at) < c.maxAge && (c.trustFor <= 0 || now.Sub(c.alive) < c.trustFor)
}

// ignoreEnd is the end of a call that track does not follow.
func ignoreEnd(error) {}

// track follows one store call (store.Hooks.Track): called as the call starts,
// it returns the function that hears how it ended. With trustFor set, an
// answer proves Redis alive as of the call's start, unless a failure was
// seen meanwhile (a late answer to an older call proves nothing about now);
// a failure forgets every entry and the proof.
func (c *openCache) track() func(error) {
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

// begin starts the subscription on first use and returns the generation to
// pass to remember after the round trip.
func (c *openCache) begin() uint64 {
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

// remember records that k was seen open by a round trip that began at
// generation gen.
func (c *openCache) remember(k string, gen uint64) {
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

// forget drops k: a pause of its scope was announced.
func (c *openCache) forget(k string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	delete(c.seen, k)
}

// reset forgets everything: the subscription changed.
func (c *openCache) reset(live bool) {
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
func (c *openCache) watch() {
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
			if m.Kind == "subscribe" && broken && c.resubscribed != nil {
				c.resubscribed()
			}
			broken = false
		case *redis.Message:
			c.forget(failover.ParseAnnouncement(m.Payload).Key)
			if c.heard != nil {
				c.heard(m.Payload)
			}
		}
		if err != nil && !errors.Is(err, redis.ErrClosed) {
			broken = true
			if c.failed != nil {
				c.failed(err)
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

// close ends the subscription; the gate goes on with a round trip per task.
func (c *openCache) close() error {
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
