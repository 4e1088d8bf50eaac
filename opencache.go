package quotagate

import (
	"context"
	"sync"
	"time"

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
//   - for at most maxAge (Config.OpenCache), which bounds how stale it can
//     be if the subscription's connection dies silently.
//
// The staleness in the normal case is the delivery delay of one Redis
// message, the same order as the round trip it saves.
type openCache struct {
	rdb     redis.UniversalClient
	channel string
	maxAge  time.Duration
	now     func() time.Time

	mu      sync.Mutex
	live    bool                 // subscribed, no error since
	gen     uint64               // bumped by every announcement and subscription change
	seen    map[string]time.Time // pause key → when seen open
	started bool                 // the watcher runs
	ps      *redis.PubSub        // the watcher's subscription, once made
	closed  bool
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
	return ok && c.live && c.now().Sub(at) < c.maxAge
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

// watch subscribes and follows the announcements until close. Subscribing
// may block on an unresponsive Redis: it happens here, never under the lock
// or on a task's path.
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
		case *redis.Message:
			c.forget(m.Payload)
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
