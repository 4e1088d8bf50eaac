package quotagate

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotagate/quotagate/internal/decide"
	"github.com/quotagate/quotagate/internal/failover"
	"github.com/quotagate/quotagate/internal/feed"
	"github.com/quotagate/quotagate/internal/local"
	"github.com/quotagate/quotagate/internal/metrics"
	"github.com/quotagate/quotagate/internal/model"
	"github.com/quotagate/quotagate/internal/schema"
	"github.com/quotagate/quotagate/internal/store"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// MinPause is the shortest pause the gate records or defers for, one
// second: a hint of zero, a negative one or a few milliseconds never makes
// a busy loop.
const MinPause = model.MinPause

// ErrStoreTimeout is returned (wrapped) when Redis does not answer within
// Config.StoreTimeout, or when, Redis having failed, a few calls already
// wait for it and the gate does not start another. Match it with
// errors.Is: it is the storage layer's own error value (internal/store).
var ErrStoreTimeout = store.ErrTimeout

// Config configures a Gate. The zero value works; every field states its
// default, and a zero or negative duration means the default unless the
// field says otherwise. Most users set Limits, and perhaps Prefix, Logger or
// FailClosed; Tuning holds the knobs of the in-process waits, for experts.
type Config struct {
	// Prefix starts every Redis key of the gate; braces in it are
	// percent-escaped so that the scope's {tag} stays the hash tag.
	// Default "quotagate".
	Prefix string

	// Limits sets proactive throughput limits for every scope of a
	// provider, keyed by Scope.Provider: rates (PerSecond, FixedWindow,
	// SlidingWindow, ...) and requests in flight (Concurrent). Several
	// limits on one scope (10 a second and 50,000 a day, or 5 in flight)
	// are all checked and spent together, in the
	// same round trip, all or nothing. Default: none; a scope without a
	// configured limit learns one from the provider (see Observe, and
	// Refusal).
	Limits map[string][]Limit

	// LimitOf, when set, chooses the limits of a scope and wins over Limits
	// when it returns true (for accounts on different plans). Default nil.
	LimitOf func(Scope) ([]Limit, bool)

	// Cost returns how many units of the limit a task spends (weighted
	// requests); values below 1 count as 1. Default: 1 for every task.
	Cost func(*asynq.Task) int

	// FailClosed defers tasks for Tuning.FailClosedDelay when the store
	// cannot answer, instead of running them (the default, fail open:
	// availability over strict protection). A fail-closed gate also admits
	// from its open cache only within StoreTimeout of Redis's last answer,
	// and never after a failed call until Redis answers again. Default
	// false.
	FailClosed bool

	// Logger receives store failures, recorded pauses and archived tasks.
	// Default slog.Default().
	Logger *slog.Logger

	// MaxPause caps any pause, hinted or not; a stored deadline farther
	// ahead than this is treated as malformed (open). Default 12 hours.
	MaxPause time.Duration

	// FallbackPause caps the pause of a refusal that carries no readable
	// hint: a malformed hint is not permission for peers to go on, nor is it
	// a known wait. Such a refusal of an open scope starts an episode
	// (internal/model/fallback.go): the scope pauses 1 second (MinPause),
	// then sends one request, the probe, while the others wait for its
	// answer; each refusal of it doubles the pause (2 s, 4 s, … up to
	// FallbackPause), and an answer without a refusal ends the episode, so
	// the next hintless refusal pauses 1 second again. Refusals of requests
	// already on their way grow nothing. While the provider refuses, the
	// scope sends one request per pause, the whole fleet's: a provider that
	// refuses all day (a daily quota spent) gets 17 requests per scope in
	// that day from the first refusal on with the default, where a minute's
	// cap would send one a minute, 1,440 (a task's MaxRetry counts the
	// refusals of its probes: see Refusal). The refused task waits the
	// scope's pause. With no limit configured, what the scope got accepted
	// before such a refusal is learned as a limit, paced
	// (internal/model/learn.go), so after the pause the fleet goes at that
	// pace, not all at once. A shorter cap finds the end of a long outage
	// sooner, at one request per cap. Default 12 hours, the reference
	// article's cap; never more than MaxPause.
	FallbackPause time.Duration

	// The refused task's own delay when its hint cannot be read and its
	// refusal could not be recorded (the store failed, so the scope's
	// pause is not known), by attempt: FallbackBase·2^(attempt-1), capped
	// at FallbackCap (see RetryDelay). Defaults 15 minutes and 12 hours
	// (15m, 30m, 1h, … 12h).
	FallbackBase time.Duration
	FallbackCap  time.Duration

	// StoreTimeout bounds every Redis call of the gate, whatever the
	// client's own timeouts (with go-redis's ContextTimeoutEnabled set the
	// bound costs nothing; without it a watchdog goroutine enforces it).
	// Default 250 milliseconds.
	StoreTimeout time.Duration

	// Durable is how many replicas must acknowledge a pause before it is
	// recorded: the refusal script is followed by WAIT on the same
	// connection of the slot's master, within half of StoreTimeout, so a
	// recorded pause survives the loss of that master; and so is its
	// announcement on the feed, on its group's master, so that the gates
	// that admit the scope without asking hear it through the failover. A
	// pause or announcement fewer replicas acknowledged is still in force
	// (logged at WARN): after a failover the promoted master has no
	// replica until one is added. Costs one more reply in each of the two
	// round trips and the replicas' acknowledgements (go test -run
	// Failover -v .; docs/measurements.md).
	// Only for *redis.Client (plain or Sentinel failover) and
	// *redis.ClusterClient. Default 0: pauses are acknowledged by the
	// master alone.
	Durable int

	// Reserve is the share of every capacity of a scope (a limit's burst or
	// window, the learned limit, the advertised budget when its size is
	// advertised) that Background work leaves to Interactive work while
	// interactive work has asked within Tuning.LendAfter (see Class). It is
	// rounded down, at least one unit and never all of a capacity: of a
	// window of 40, 8; of a burst of 10, 2; of 9, 1; of 1, nothing. Default 0.2 (Stripe's load shedder
	// keeps about a fifth for critical work); negative: no reserve; above 1
	// counts as 1.
	Reserve float64

	// InteractiveQueues are the asynq queues whose tasks are Interactive
	// unless NewTask gave them a class. Default none. With any, interactive
	// work is expected in every scope: Background work never reserves the
	// Reserve of a window ahead of now, even before the scope's first
	// interactive task, so that task finds it (see Class); and its waits
	// behind a configured limit leave one worker of the process free, so
	// that an interactive task of a scope whose backlog holds every other
	// worker is dequeued at once.
	InteractiveQueues []string

	// Tuning holds the knobs of the in-process waits and the open cache.
	// Its zero value is the default of every knob.
	Tuning Tuning
}

// Tuning holds the knobs that trade worker time for timeliness. The
// defaults were chosen with the example (go run ./example -bench;
// docs/measurements.md); a zero value means the default.
type Tuning struct {
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

	// MaxHolders is how many workers of this process may hold in-process,
	// per scope, for a short wait: a pause ending within MaxHold and one
	// asynq tick (a second), or, as near, a window opening (fixed windows,
	// the learned limit), an instant no slot was reserved for, and for
	// Interactive work any limit's slot; as many more hold for Interactive
	// work, which has places of its own. A scope whose reopening is known
	// to use fewer (the budget it learned) has that many places. The
	// holders reopen the scope at its deadline's millisecond, together;
	// the others are deferred through asynq and paced from the deadline on
	// (a jitter, or their slot in the reopening line), so the reopening is
	// no herd and their workers take other tasks meanwhile. Default 12:
	// enough to reopen a scope at its deadline with the workers its quota
	// can use (fewer leave the reopening short of workers, and the gated
	// fleet slower than one without the gate); negative means no worker
	// holds for a pause. A wait for a slot of a Concurrent limit is not
	// bounded by it (each release wakes one waiting worker, not a herd;
	// bounded by MaxHold in all), unless it is negative.
	//
	// The places are per scope, so they alone do not keep one scope's
	// waiting, nor many scopes pausing at once, from taking every worker
	// from other scopes' tasks; one rule does (not a knob): a worker waits
	// in-process in any way (until a slot reserved ahead, for a pause or a
	// window, for a slot in flight) only while fewer than half the tasks
	// inside the Middleware wait, unless every waiter is of its own scope
	// and no task of another scope (or without one) entered the Middleware
	// in the last 2.5 seconds; beside another scope, while fewer than half
	// the process's workers wait (the most tasks seen inside it at once).
	// A worker that may not wait reserves no slot ahead and is deferred to
	// its instant; the freed worker takes the next task of the queue. A process that serves one scope alone gives its
	// reopening every worker, but one in its first 2.5 seconds: its first
	// tasks may all be of one scope, the others' queued behind them, and
	// the one left takes task after task of the queue until it meets one.
	// When a task of another scope enters, the scope's holders let past
	// the share ask again, and those past it are deferred. A task on a
	// last attempt without NewTask's reserve waits whatever the count.
	MaxHolders int

	// ReopenJitter caps the spread of the tasks deferred through asynq by a
	// pause when the scope has no limit: each waits a random extra time
	// within a tenth of the remaining pause, at most ReopenJitter. (With a
	// limit they are spread one slot apart at the limit's rate instead.)
	// Default 1 second; negative disables.
	ReopenJitter time.Duration

	// OpenCache is how long a scope without a limit, once seen open, is
	// admitted without a round trip to Redis. Every change that can close
	// a scope (a pause, a resume, a budget gained) is announced on the
	// feed of pauses, which the gate reads every FeedInterval
	// (internal/feed), and the gate asks Redis about the scope from the
	// moment it reads the entry (the gate that records it, at once) until
	// a round trip sees it open again; it also forgets everything, and
	// asks Redis for every task, whenever the feed is late or broken,
	// until it caught up from a snapshot, which names every scope an
	// entry named within the last 25 hours. So a gate that observes no
	// responses (no Transport, no Observe) admits a scope it never asked
	// about, and no entry named, without any round trip; one that does
	// asks once, for the first contact's probe and slow start. OpenCache
	// does not bound staleness. It bounds how long an announcement lost
	// with its process (one that died between a script and its
	// announcement) goes unheard by a gate that saw the scope open, when
	// nothing refuses afterwards: a provider's refusal of a request sent
	// into the pause announces it again. And it is how often a process
	// asks again about a scope it saw open and keeps admitting. Default
	// 10 minutes; negative disables the cache: every task asks Redis.
	OpenCache time.Duration

	// FeedInterval is how often the gate reads the feed of pauses (see
	// OpenCache): a pause recorded anywhere is known here within about
	// FeedInterval, and the gate trusts the feed only while its last read
	// began within twice FeedInterval. Each read is one round trip per
	// Redis master for every gate, whatever the number of pauses.
	// Default 100 ms.
	FeedInterval time.Duration

	// FailClosedDelay is the deferral when Config.FailClosed is set and the
	// store fails. Default 10 seconds.
	FailClosedDelay time.Duration

	// LendAfter is how long after the last Interactive task of a scope
	// asked Background work may spend the scope's Config.Reserve too (it
	// gives it back at the next interactive task). A person who opened a
	// page asks again within seconds; a reserve lent sooner than that is
	// spent when they do. Default 30 seconds.
	LendAfter time.Duration
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
	c.Prefix = schema.Prefix(c.Prefix) // the scope's tag must stay the hash tag
	def(&c.MaxPause, 12*time.Hour)
	c.MaxPause = max(c.MaxPause, MinPause)
	def(&c.FallbackPause, 12*time.Hour)
	c.FallbackPause = min(c.FallbackPause, c.MaxPause) // a longer pause would read as malformed
	def(&c.FallbackBase, 15*time.Minute)
	def(&c.FallbackCap, 12*time.Hour)
	def(&c.StoreTimeout, 250*time.Millisecond)
	switch {
	case c.Reserve == 0:
		c.Reserve = 0.2
	case c.Reserve < 0:
		c.Reserve = 0
	}
	c.Reserve = min(c.Reserve, 1)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	t := &c.Tuning
	if t.MaxHold == 0 {
		t.MaxHold = 1500 * time.Millisecond
	}
	t.MaxHold = max(t.MaxHold, 0) // negative disables
	if t.MaxHolders == 0 {
		t.MaxHolders = 12
	}
	if t.FeedInterval <= 0 {
		t.FeedInterval = 100 * time.Millisecond
	}
	if t.OpenCache == 0 {
		t.OpenCache = openCacheAge
	}
	if t.ReopenJitter == 0 {
		t.ReopenJitter = time.Second
	}
	t.ReopenJitter = max(t.ReopenJitter, 0)
	def(&t.FailClosedDelay, 10*time.Second)
	def(&t.LendAfter, 30*time.Second)
	return c
}

// openCacheAge is Tuning.OpenCache's default: as long as a scope's
// records are kept (model.LearnTTL), so a process reads them back within
// their life.
const openCacheAge = time.Duration(model.LearnTTL) * time.Microsecond

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
	cfg         Config
	store       *store.Store
	open        *local.OpenCache
	feed        *feed.Reader // the feed of pauses that the open cache and mem hear (internal/feed)
	holders     local.Holders
	expect      bool             // interactive work is expected: Config.InteractiveQueues (keepsWorker)
	slots       local.SlotWakers // workers waiting for a slot of a concurrency limit
	absorbed    local.Absorbed   // refusals of requests already on their way, per pause (log)
	inside      atomic.Int64     // tasks inside the Middleware, with a scope or not (see local.Holders)
	uncounted   local.Uncounted
	inflight    local.InFlight // this process's tasks in flight, per scope (the level of a refusal the records know none of)
	metrics     *metrics.Metrics
	observed    atomic.Bool   // Transport or Observe is in use: responses teach the budget
	silent      sync.Map      // pause key → when its provider last advertised no budget
	silentNotes atomic.Uint64 // notes taken in silent (see rememberSilent)

	// mem is what the gate remembers of the pauses in force, to re-assert
	// those a failover loses (internal/failover; the glue in reassert.go);
	// nil: nothing (tests).
	mem *failover.Memory

	// The worker's clock and the jitter's randomness. The clock only aligns
	// asynq's whole-second retry times, ages open-cache entries and dates a
	// fail-closed deferral: every shared deadline comes from Redis TIME.
	// Tests replace both with newGate.
	now  func() time.Time
	rand func() float64 // uniform in [0, 1), safe for concurrent use
}

// New returns a gate that keeps its state in rdb. It works with a single
// node, a failover or a cluster client: all keys of a scope share one hash
// tag.
func New(rdb redis.UniversalClient, cfg Config) *Gate {
	return newGate(rdb, cfg, time.Now, rand.Float64)
}

// newGate is New with the worker's clock and the jitter's randomness given.
func newGate(rdb redis.UniversalClient, cfg Config, now func() time.Time, rnd func() float64) *Gate {
	cfg = cfg.withDefaults()
	m := newMetrics()
	g := &Gate{cfg: cfg, now: now, rand: rnd, metrics: m}
	g.expect = len(cfg.InteractiveQueues) > 0
	// A count runs as long as a cycle the scope's records keep.
	g.uncounted.Span = time.Duration(model.LearnTTL) * time.Microsecond
	var trustFor time.Duration // a fail-closed gate's open cache needs a proof of life
	if cfg.FailClosed {
		trustFor = cfg.StoreTimeout
	}
	recovered := func() { g.mem.Recovered() } // g.mem as it is then: tests may have set it nil
	// The feed's polls are paced by a real ticker, so its freshness is
	// measured on the real clock; what it hears is dated by the gate's
	// (heard).
	g.feed = feed.NewReader(feed.Config{Client: rdb, Prefix: cfg.Prefix, Interval: cfg.Tuning.FeedInterval, Now: time.Now,
		Heard:  g.heard,
		Reset:  func(live bool) { g.feedReset(live, recovered) },
		Failed: func(err error) { g.store.Failed(err) }})
	g.open = local.NewOpenCache(g.feed, cfg.Tuning.OpenCache, trustFor, now)
	g.store = store.New(store.Config{Client: rdb, Prefix: cfg.Prefix, Timeout: cfg.StoreTimeout, MaxPause: cfg.MaxPause,
		Durable: cfg.Durable, Log: cfg.Logger, Reserve: int64(math.Round(cfg.Reserve * 1000)), Lend: cfg.Tuning.LendAfter,
		Expect: g.expect,
		Hooks:  store.Hooks{RoundTrip: m.RoundTrip, Track: g.open.Track, Recovered: g.storeRecovered}})
	g.mem = failover.New(failover.Config{Store: g.store, Now: now, Slack: cfg.StoreTimeout, Logger: cfg.Logger, Moved: g.open.Ask})
	return g
}

// heard takes an entry of the feed: the admissions the open cache let
// through uncounted are reported at once for a pause (a resume drops
// them; a budget gained leaves them to the scope's next round trip, which
// the ask makes), the cache holds the scope as an ask, whatever the
// entry's format, and the memory notes a pause of this format, as
// received now by the gate's clock.
func (g *Gate) heard(e feed.Entry, _ time.Time) {
	switch {
	case e.Resumed:
		g.uncounted.Take(e.Key) // a resume forgets what they would teach
	case e.Current() && e.UntilMs > 0: // a pause: see local.Uncounted
		if c := g.uncounted.Take(e.Key); c.N > 0 {
			g.store.ReportLater(schema.PauseKeys(e.Key), c.N, c.Age(g.now()))
		}
	}
	g.open.Ask(e.Key)
	g.mem.Heard(e, g.now())
}

// storeRecovered follows the store answering after it failed: a master
// may have changed, so the feed reloads its snapshot (a new master may
// have lost some of a log) and the memory re-asserts what the new master
// may have lost.
func (g *Gate) storeRecovered() {
	g.feed.Resync()
	g.mem.Recovered()
}

// feedReset follows the feed going stale (live false) or catching up
// from a snapshot: after a gap (any snapshot but the first), a master may
// have changed, and the memory re-asserts what it may have lost
// (recovered).
func (g *Gate) feedReset(live bool, recovered func()) {
	g.open.Reset(live)
	if live && g.feed.Snapshots() > 1 {
		g.mem.Reannounce(g.feed.LastSnapshot()) // what the gap's failover lost of the feed, by the run recovered asks for
		recovered()
		g.store.RetryAnnouncements() // this gate's own, refused during the gap
	}
}

// Close stops the gate's reads of the feed of pauses (see
// Tuning.OpenCache). The gate keeps working after Close, with one round
// trip per admission. It does not close the Redis client.
func (g *Gate) Close() error {
	g.mem.Close()
	g.open.Close()
	g.feed.Close()
	g.store.FlushAnswers(context.Background())
	return nil
}

// Pause is a scope's pause deadline as Redis keeps it and, from State,
// what the gate knows of the scope's quota.
type Pause struct {
	Scope Scope
	// Until is when the scope admits a request again, per Redis TIME:
	// the pause deadline in force, the reset of a spent budget, or the
	// next slot of a limit with no capacity within Tuning.MaxHold; zero
	// when the scope admits now. Reason says which.
	Until     time.Time
	Remaining time.Duration // Until minus Redis TIME when it was read
	Reason    Reason        // why the scope waits; meaningful when Until is set

	// Budget is what the provider advertised on its responses (see
	// Observe); nil when it advertises nothing or nothing was observed.
	Budget *Budget
	// Learned is the limit the scope learned from refusals (what the
	// provider accepted between a reopening and the next refusal): a
	// SlidingWindow when its window is longer than Tuning.MaxHold, as it is
	// applied, a FixedWindow otherwise; zero when none, or once ten minutes
	// passed without a refusal.
	Learned Limit
	// LearnedInFlight is how many requests the scope may have in flight,
	// once refusals showed that its provider limits requests in flight
	// rather than per window (a concurrency limit learned, shared through
	// Redis as a Concurrent limit is; the scope's refusals then defer the
	// refused task only, and Learned no longer applies), or beside a
	// window (Learned applies too, and refusals pause the scope); 0 when
	// not learned. Resume forgets it.
	LearnedInFlight int
	// LimitBacklog is how far ahead of Redis TIME the scope's first Limit
	// is spent (its GCRA theoretical arrival time minus now); 0 when the
	// scope has no such state. With a Limit of interval i and burst b, a
	// task of cost c is admitted at once while LimitBacklog ≤ (b−c)·i. A
	// pause raises it to reach past the deadline. For a SlidingWindow it
	// is how long until the log's last admission leaves its window (the
	// log is empty then); 0 for a Concurrent limit (Reason says
	// ReasonInFlight while its slots are taken).
	LimitBacklog time.Duration
}

// Budget is a scope's quota as its provider advertised it, spent by the
// admissions since.
type Budget struct {
	Remaining int64     // requests left, counting those admitted and not yet answered
	Limit     int64     // the quota's size; 0 when not advertised
	Reset     time.Time // when the quota is whole again; zero when unknown
}

func (p Pause) String() string {
	if p.Until.IsZero() {
		return p.Scope.String() + " is open"
	}
	if p.Reason == ReasonPaused {
		return fmt.Sprintf("%s paused for %v (until %s)", p.Scope, p.Remaining.Round(time.Millisecond), p.Until.UTC().Format(RFC3339Milli))
	}
	return fmt.Sprintf("%s waits %v (%s, until %s)", p.Scope, p.Remaining.Round(time.Millisecond), p.Reason, p.Until.UTC().Format(RFC3339Milli))
}

// pauseOf is the Pause that a dry admission a of s describes, asked with
// a hold of hold.
func pauseOf(s Scope, a store.Admission, hold time.Duration) Pause {
	p := Pause{Scope: s, Budget: budgetOf(a.Budget), Learned: learnedOf(a.Learned, hold), LearnedInFlight: int(a.Learned.InFlight),
		LimitBacklog: time.Duration(a.Backlog) * time.Microsecond}
	if a.Code == model.Admitted {
		return p
	}
	p.Reason = publicReason(a.Reason)
	p.Until, p.Remaining = a.Admits(), a.Remaining()
	return p
}

// budgetOf is the Budget of b; nil when none is known.
func budgetOf(b store.Budget) *Budget {
	if !b.Known {
		return nil
	}
	out := &Budget{Remaining: b.Remaining, Limit: b.Limit}
	if b.Reset != 0 {
		out.Reset = time.UnixMicro(b.Reset)
	}
	return out
}

// learnedOf is the learned limit l as a Limit, as it is applied under a
// hold of hold: a log (learnState.logSpec) when its window is longer than
// hold, a fixed window otherwise; zero when none.
func learnedOf(l store.Learned, hold time.Duration) Limit {
	n, w := int(l.N), time.Duration(l.Window)*time.Microsecond
	if n > 0 && w > hold {
		return SlidingWindow(n, w)
	}
	if n > 0 && w > 0 {
		return FixedWindow(n, w)
	}
	return Limit{}
}

// clamp bounds a pause to [MinPause, MaxPause]; any non-positive or
// overflowing value becomes MinPause.
func (g *Gate) clamp(d time.Duration) time.Duration {
	return min(max(d, MinPause), g.cfg.MaxPause)
}

// Pause pauses s for d, clamped to [MinPause, Config.MaxPause]: the
// deadline becomes max(existing, now+d), atomically, with now from Redis
// TIME. It returns the deadline in force afterwards, which may be later than
// the one proposed. Use it by hand (a provider's incident); a refusal is
// recorded by the Middleware or the Transport, which also learn from it.
func (g *Gate) Pause(ctx context.Context, s Scope, d time.Duration) (Pause, error) {
	if err := s.Validate(); err != nil {
		return Pause{}, err
	}
	return g.pause(ctx, s, scopeKeys(g.cfg.Prefix, s), d, store.Refusal{Operator: true})
}

// pause is Pause for a valid scope s whose keys are k.
func (g *Gate) pause(ctx context.Context, s Scope, k schema.Keys, d time.Duration, r store.Refusal) (Pause, error) {
	g.open.Ask(k.Pause) // before the round trip: this worker stops at once
	rec, err := g.store.Pause(ctx, k, g.clamp(d), r, specs(g.limitsOf(s))...)
	if err != nil {
		return Pause{}, fmt.Errorf("quotagate: pause %s: %w", s.Provider, err)
	}
	until, rem := rec.Until, rec.Remaining
	g.notePause(k, until, rem, r.Operator)
	return Pause{Scope: s, Until: until, Remaining: rem, Reason: ReasonPaused}, nil
}

// Remaining returns how long s stays paused: 0 when it is open, never
// negative.
func (g *Gate) Remaining(ctx context.Context, s Scope) (time.Duration, error) {
	p, err := g.State(ctx, s)
	return p.Remaining, err
}

// State returns the pause of s (Until is zero when s is open), the budget
// its provider advertised and the limit it learned from refusals. It reads
// the scope's whole capacity: background work may wait for the reserve it
// leaves to interactive work (see Class) while State says open.
func (g *Gate) State(ctx context.Context, s Scope) (Pause, error) {
	if err := s.Validate(); err != nil {
		return Pause{}, err
	}
	r := admitRequest(g.limitsOf(s), 1, g.cfg.Tuning.MaxHold)
	r.Probe, r.Dry = g.probe(), true
	a, err := g.store.Admit(ctx, scopeKeys(g.cfg.Prefix, s), r)
	if err != nil {
		return Pause{}, fmt.Errorf("quotagate: read state of %s: %w", s.Provider, err)
	}
	return pauseOf(s, a, r.Hold), nil
}

// Resume opens s now: it deletes everything that holds the scope back (its
// pause, its limits' state and reopening line, a spent budget, the learned
// limit's current window); the learned limit itself stays. Tasks already
// deferred keep their retry time.
func (g *Gate) Resume(ctx context.Context, s Scope) error {
	if err := s.Validate(); err != nil {
		return err
	}
	g.open.Ask(scopeKeys(g.cfg.Prefix, s).Pause)
	g.mem.Drop(scopeKeys(g.cfg.Prefix, s).Pause)
	if err := g.store.Resume(ctx, scopeKeys(g.cfg.Prefix, s)); err != nil {
		return fmt.Errorf("quotagate: resume %s: %w", s.Provider, err)
	}
	return nil
}

// limitsOf returns the configured limits of s, zero limits left out.
func (g *Gate) limitsOf(s Scope) []Limit {
	ls := g.cfg.Limits[s.Provider]
	if g.cfg.LimitOf != nil {
		if l, ok := g.cfg.LimitOf(s); ok {
			ls = l
		}
	}
	for i, l := range ls {
		if l.IsZero() { // rare: copy without the zero ones
			kept := slices.Clone(ls[:i])
			for _, l := range ls[i:] {
				if !l.IsZero() {
					kept = append(kept, l)
				}
			}
			return kept
		}
	}
	return ls
}

// probe is how long the first request of a scope the gate knows nothing
// about is given to bring back the budget its provider advertises, while
// the other workers of the scope hold: zero (no probe) until responses are
// observed (Transport, Observe), for the answer would never come. MaxHold
// + one asynq tick, as long as a worker may hold for a reopening: a
// provider slower than that to answer is probed again by the next task.
func (g *Gate) probe() time.Duration {
	if !g.observed.Load() || g.cfg.Tuning.MaxHold <= 0 {
		return 0
	}
	return g.cfg.Tuning.MaxHold + decide.AsynqTick
}
