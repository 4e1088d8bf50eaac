package quotagate

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// MinPause is the shortest pause the gate records or defers for: a hint of
// zero, a negative one or a few milliseconds never makes a busy loop.
const MinPause = time.Second

// Config configures a Gate. The zero value works; every field states its
// default, and a zero or negative duration means the default unless the
// field says otherwise.
type Config struct {
	// Prefix starts every Redis key of the gate; braces in it are
	// percent-escaped so that the scope's {tag} stays the hash tag.
	// Default "quotagate".
	Prefix string

	// MaxPause caps any pause, hinted or not; a stored deadline farther
	// ahead than this is treated as malformed (open). Default 12 hours.
	MaxPause time.Duration

	// FallbackPause is how long the scope pauses when a refusal carries no
	// readable hint: a malformed hint is not permission for peers to go on.
	// The refused task itself waits the longer Fallback schedule. Default 1
	// minute.
	FallbackPause time.Duration

	// Fallback is the refused task's own delay when its hint cannot be read,
	// by attempt: FallbackBase·2^(attempt-1), capped at FallbackCap.
	// Defaults 15 minutes and 12 hours (15m, 30m, 1h, 2h, … 12h).
	FallbackBase time.Duration
	FallbackCap  time.Duration

	// Limits sets a proactive throughput limit for every scope of a
	// provider, keyed by Scope.Provider. Default: none.
	Limits map[string]Limit

	// LimitOf, when set, chooses the limit of a scope and wins over Limits
	// when it returns true (for accounts on different plans). Default nil.
	LimitOf func(Scope) (Limit, bool)

	// Cost returns how many units of the limit a task spends (weighted
	// requests); values below 1 count as 1. Default: 1 for every task.
	Cost func(*asynq.Task) int

	// MaxHold is the longest a worker waits in-process instead of deferring
	// through asynq, whose retry times are whole seconds and are forwarded
	// every DelayedTaskCheckInterval. A slot of the limit up to MaxHold
	// ahead is reserved and waited for, so the pool keeps the limit's pace
	// (a scope with a limit of r per second may keep about r×MaxHold
	// workers waiting); a task deferred to a later slot wakes up to MaxHold
	// before it. A pause ending within MaxHold is waited out by at most
	// MaxHolders workers. Longer waits free the worker. Default 1.5
	// seconds; a negative value disables holding.
	MaxHold time.Duration

	// MaxHolders is how many workers of this process may wait in-process,
	// per scope, for a pause of at most MaxHold to end (they reopen the
	// scope at its deadline, together); the others are deferred through
	// asynq, so one paused provider cannot take every worker from the
	// others. Default 12; negative means no worker waits for a pause.
	MaxHolders int

	// ReopenJitter caps the spread of the tasks deferred through asynq by a
	// pause when the scope has no limit: each waits a random extra time
	// within a tenth of the remaining pause, at most ReopenJitter. (With a
	// limit they are spread one slot apart at the limit's rate instead.)
	// Default 1 second; negative disables.
	ReopenJitter time.Duration

	// OpenCache is how long a scope without a limit, once seen open, is
	// admitted without a round trip to Redis. Every pause is announced on
	// a Redis channel and the gate forgets the scope when the announcement
	// arrives (the gate that records it, at once); the gate also forgets
	// everything whenever its subscription fails, so OpenCache only bounds
	// staleness if the subscription's connection dies silently. The
	// subscription is opened on first use; Close releases it. Default 1
	// second; negative disables (one round trip per task).
	OpenCache time.Duration

	// StoreTimeout bounds every Redis call of the gate, whatever the
	// client's own timeouts (with go-redis's ContextTimeoutEnabled set the
	// bound costs nothing; without it a watchdog goroutine enforces it).
	// Default 250 milliseconds.
	StoreTimeout time.Duration

	// FailClosed defers tasks for FailClosedDelay when the store cannot
	// answer, instead of running them (the default, fail open: availability
	// over strict protection). Default false.
	FailClosed bool

	// FailClosedDelay is the deferral when FailClosed is set and the store
	// fails. Default 10 seconds.
	FailClosedDelay time.Duration

	// Logger receives store failures and recorded pauses. Default
	// slog.Default().
	Logger *slog.Logger

	// Now is the worker's clock, used only to align asynq's whole-second
	// retry times (deadlines come from Redis TIME). Default time.Now.
	Now func() time.Time

	// Rand returns a uniform value in [0, 1) for the reopening jitter. It
	// is called by many workers at once and must be safe for concurrent use
	// (a seeded *rand.Rand is not: guard it with a mutex). Default
	// math/rand/v2's Float64.
	Rand func() float64
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) { // zero or negative: the default
		if *d <= 0 {
			*d = v
		}
	}
	if c.Prefix == "" {
		c.Prefix = "quotagate"
	}
	c.Prefix = braceEscaper.Replace(c.Prefix) // the scope's tag must stay the hash tag
	def(&c.MaxPause, 12*time.Hour)
	c.MaxPause = max(c.MaxPause, MinPause)
	def(&c.FallbackPause, time.Minute)
	def(&c.FallbackBase, 15*time.Minute)
	def(&c.FallbackCap, 12*time.Hour)
	if c.MaxHold == 0 {
		c.MaxHold = 1500 * time.Millisecond
	}
	c.MaxHold = max(c.MaxHold, 0) // negative disables
	if c.MaxHolders == 0 {
		c.MaxHolders = 12
	}
	if c.OpenCache == 0 {
		c.OpenCache = time.Second
	}
	if c.ReopenJitter == 0 {
		c.ReopenJitter = time.Second
	}
	c.ReopenJitter = max(c.ReopenJitter, 0)
	def(&c.StoreTimeout, 250*time.Millisecond)
	def(&c.FailClosedDelay, 10*time.Second)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
	return c
}

// Gate is the shared admission state of remote quotas, kept in Redis.
//
// A scope is open until a refusal pauses it. Pause stores an absolute
// deadline (Redis TIME + the clamped delay) that only ever moves later and
// expires at that same instant; Remaining reads how long is left, computed in
// Redis, never negative. Every worker of every process that shares the Redis
// and the Prefix sees the same deadline, so one 429 quiets the whole fleet
// until the provider's window reopens, and the scopes of other providers or
// credentials go on.
//
// A scope may also have a Limit, a proactive budget checked in the same round
// trip (see Limit). The Middleware applies both to asynq tasks, RetryDelay
// turns their answers into asynq retry times, and Transport applies them to
// HTTP requests.
//
// A missing, expired or malformed record means open. When Redis cannot answer
// within StoreTimeout the gate fails open (logged) unless FailClosed is set.
type Gate struct {
	cfg     Config
	store   store
	open    *openCache
	holders holders
	metrics *metrics
}

// New returns a gate that keeps its state in rdb. It works with a single
// node, a failover or a cluster client: all keys of a scope share one hash
// tag.
func New(rdb redis.UniversalClient, cfg Config) *Gate {
	cfg = cfg.withDefaults()
	m := newMetrics()
	s := store{rdb: rdb, prefix: cfg.Prefix, timeout: cfg.StoreTimeout, maxPause: cfg.MaxPause, direct: honoursDeadlines(rdb), metrics: m}
	return &Gate{cfg: cfg, store: s, open: &openCache{rdb: rdb, channel: s.channel(), maxAge: cfg.OpenCache, now: cfg.Now}, metrics: m}
}

// Close releases the gate's subscription to pause announcements (see
// Config.OpenCache). The gate keeps working after Close, with one round
// trip per admission. It does not close the Redis client.
func (g *Gate) Close() error { return g.open.close() }

// Pause is a scope's pause deadline as Redis keeps it.
type Pause struct {
	Scope     Scope
	Until     time.Time     // the deadline in force, per Redis TIME
	Remaining time.Duration // Until minus Redis TIME when it was read

	// LimitBacklog is how far ahead of Redis TIME the scope's Limit is
	// spent (its GCRA theoretical arrival time minus now), as read by
	// State; 0 when the scope has no limit state. With a Limit of interval
	// i and burst b, a task of cost c is admitted at once while
	// LimitBacklog ≤ (b−c)·i. A pause raises it to reach past the deadline.
	LimitBacklog time.Duration
}

func (p Pause) String() string {
	return fmt.Sprintf("%s paused for %v (until %s)", p.Scope, p.Remaining.Round(time.Millisecond), p.Until.UTC().Format(time.RFC3339Nano))
}

// clamp bounds a pause to [MinPause, MaxPause]; any non-positive or
// overflowing value becomes MinPause.
func (g *Gate) clamp(d time.Duration) time.Duration {
	return min(max(d, MinPause), g.cfg.MaxPause)
}

// Pause pauses s for d, clamped to [MinPause, Config.MaxPause]: the
// deadline becomes max(existing, now+d), atomically, with now from Redis
// TIME. It returns the deadline in force afterwards, which may be later than
// the one proposed.
func (g *Gate) Pause(ctx context.Context, s Scope, d time.Duration) (Pause, error) {
	if err := s.Validate(); err != nil {
		return Pause{}, err
	}
	k := scopeKeys(g.cfg.Prefix, s)
	g.open.forget(k.pause) // before the round trip: this worker stops at once
	until, rem, err := g.store.pause(ctx, k, g.clamp(d))
	if err != nil {
		return Pause{}, fmt.Errorf("quotagate: pause %s: %w", s.Provider, err)
	}
	return Pause{Scope: s, Until: until, Remaining: rem}, nil
}

// Remaining returns how long s stays paused: 0 when it is open, never
// negative.
func (g *Gate) Remaining(ctx context.Context, s Scope) (time.Duration, error) {
	p, err := g.State(ctx, s)
	return p.Remaining, err
}

// State returns the pause of s and its limit backlog, in one round trip;
// Until is zero when s is open.
func (g *Gate) State(ctx context.Context, s Scope) (Pause, error) {
	if err := s.Validate(); err != nil {
		return Pause{}, err
	}
	p, err := g.store.remaining(ctx, scopeKeys(g.cfg.Prefix, s))
	if err != nil {
		return Pause{}, fmt.Errorf("quotagate: read pause of %s: %w", s.Provider, err)
	}
	p.Scope = s
	return p, nil
}

// Resume opens s now, deleting its pause. Tasks already deferred keep their
// retry time.
func (g *Gate) Resume(ctx context.Context, s Scope) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if err := g.store.resume(ctx, scopeKeys(g.cfg.Prefix, s)); err != nil {
		return fmt.Errorf("quotagate: resume %s: %w", s.Provider, err)
	}
	return nil
}

// limitOf returns the limit of s.
func (g *Gate) limitOf(s Scope) Limit {
	if g.cfg.LimitOf != nil {
		if l, ok := g.cfg.LimitOf(s); ok {
			return l
		}
	}
	return g.cfg.Limits[s.Provider]
}
