package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotagate/quotagate/internal/model"
	"github.com/redis/go-redis/v9"
)

// The store keeps a scope's shared state in Redis. Every deadline is computed
// inside a script from Redis TIME: no worker clock enters the shared state.
// Records that are missing, expired or malformed read as "open".

// Config is what a store runs with, as the gate configures it.
type Config struct {
	Client   redis.UniversalClient
	Prefix   string        // of every key (quotagate.Config.Prefix)
	Timeout  time.Duration // the bound of every call (Config.StoreTimeout)
	MaxPause time.Duration // a deadline farther ahead is malformed (Config.MaxPause)
	Durable  int           // replicas that acknowledge a pause (Config.Durable)
	Reserve  int64         // per mille left to interactive work (Config.Reserve)
	Lend     time.Duration // Tuning.LendAfter
	Expect   bool          // interactive work is expected (Config.InteractiveQueues; model.Params.Expect)
	Log      *slog.Logger  // hears a pause fewer replicas than Durable acknowledged; nil: not logged
	Hooks
}

// Hooks are what the gate hears of the store's calls; a nil hook hears
// nothing.
type Hooks struct {
	// RoundTrip hears every call as it ends: op names it (admit,
	// observe, pause, release, resume, scan or state), start is when it
	// began, err how it ended (the metrics: quotagate's metrics.go).
	RoundTrip func(ctx context.Context, op string, start time.Time, err error)

	// Track, when set, is called as a call starts; the function it
	// returns hears how the call ended: nil when Redis answered, the
	// error when the store failed (not when the caller's own context
	// ended). The open cache uses it as its proof of life
	// (internal/local, OpenCache.Track).
	Track func() func(error)

	// Recovered, when set, is called when Redis answers a call after one
	// failed (the gate re-asserts the pauses it remembers:
	// internal/failover's Memory.Recovered).
	Recovered func()
}

// Store runs the scripts with a bounded timeout.
type Store struct {
	rdb      redis.UniversalClient
	prefix   string
	timeout  time.Duration
	maxPause time.Duration
	direct   bool          // the client honours context deadlines: no watchdog goroutine needed
	durable  int           // Config.Durable: replicas that acknowledge a pause
	reserve  int64         // Config.Reserve, per mille
	lend     time.Duration // Tuning.LendAfter
	expect   bool          // interactive work is expected
	log      *slog.Logger
	hooks    Hooks

	// failed hears every failure: a cluster client reloads its layout
	// (topology.go).
	failed func(error)

	// running counts the calls whose watchdog goroutine is running, and
	// failing is set by a failed call and cleared by an answered one (see
	// maxRunning).
	running atomic.Int32
	failing atomic.Bool

	answers answers // observations kept for their scope's next round trip (answers.go)

	// retry is closed, and replaced, when the pending announcements are
	// to be tried at once (RetryAnnouncements; announce.go).
	retryMu sync.Mutex
	retry   chan struct{}
	// retryFirst is the first wait before an announcement is tried again
	// (announceFirst; tests set it longer)
	retryFirst time.Duration
}

// New returns the store of c.
func New(c Config) *Store {
	return &Store{rdb: c.Client, prefix: c.Prefix, timeout: c.Timeout, maxPause: c.MaxPause, direct: honoursDeadlines(c.Client),
		durable: c.Durable, reserve: c.Reserve, lend: c.Lend, expect: c.Expect, log: c.Log, hooks: c.Hooks, failed: newReloader(c.Client).failed,
		retryFirst: announceFirst}
}

// Client is the client the store calls Redis with (Config.Client).
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// Timeout is the bound of every call (Config.Timeout).
func (s *Store) Timeout() time.Duration { return s.timeout }

// Prefix is the prefix of every key (Config.Prefix).
func (s *Store) Prefix() string { return s.prefix }

// Failed hears a failure of a call the store did not make on its client
// (the feed's polls: internal/feed): one that may mean a master moved has a
// cluster client reload its layout, as the store's own failures do
// (topology.go).
func (s *Store) Failed(err error) { s.failed(err) }

// maxRunning caps, per gate, the calls left running while the store fails.
// Once a call has failed (timed out, or refused) and until one is answered,
// a new call starts only while fewer than maxRunning are running; beyond,
// the store answers at once with ErrTimeout, starting no goroutine and
// taking no connection, and the gate applies its failure policy without
// waiting. Without the cap, while Redis hangs, every call of a client
// without ContextTimeoutEnabled was abandoned at StoreTimeout but kept its
// goroutine and a pooled connection until go-redis's own read timeout (3 s
// by default), for every task, all along the hang. (The calls already
// running when Redis starts to hang, at most one per worker, run out
// their time anyway.) Four: enough calls to notice a recovery as soon as
// Redis answers one, even with a connection that never will, and few
// enough that a hung Redis holds no more than a handful of the connections
// of a pool it shares with the application (go-redis's default pool is 10
// per CPU).
const maxRunning = 4

// honoursDeadlines reports whether go-redis applies context deadlines to
// socket I/O for this client (Options.ContextTimeoutEnabled).
func honoursDeadlines(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// ErrTimeout is returned (wrapped) when Redis does not answer within
// Config.Timeout (quotagate.ErrTimeout is this error).
var ErrTimeout = errors.New("quotagate: store timeout")

// run evaluates a script and decodes its named reply (see namedReply); op
// names the script in the metrics.
func (s *Store) run(ctx context.Context, op string, script *redis.Script, names []string, keys []string, args ...any) (map[string]int64, map[string]string, error) {
	v, err := bounded(ctx, s, op, func(ctx context.Context) (any, error) {
		return script.Run(ctx, s.rdb, keys, args...).Result()
	})
	if err != nil {
		return nil, nil, err
	}
	return model.NamedReply(v, names)
}

// bounded runs call within s.timeout. go-redis ignores context deadlines on
// socket I/O unless Options.ContextTimeoutEnabled is set; for such a client
// the call runs in a goroutine and, past the timeout, the caller goes on while
// the call finishes on its own. A call cut by the timeout returns an error
// wrapping ErrTimeout, and so does a call refused at once by the cap on
// calls left running while the store fails (maxRunning). Its duration and
// failure are heard under op (Hooks.RoundTrip).
func bounded[T any](ctx context.Context, s *Store, op string, call func(context.Context) (T, error)) (v T, err error) {
	if s.hooks.RoundTrip != nil {
		defer func(start time.Time) { s.hooks.RoundTrip(ctx, op, start, err) }(time.Now())
	}
	var zero T
	done := s.tracker()
	if err := s.startCall(); err != nil {
		done(err)
		return zero, err
	}
	tctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	r := runWithin(tctx, s, call)
	if r.err != nil && timedOut(tctx, r.err) {
		r = result[T]{zero, fmt.Errorf("%w after %v: %v", ErrTimeout, s.timeout, r.err)}
	}
	s.endCall(ctx, r.err, done)
	return r.v, r.err
}

// tracker returns the function that hears how a call ends (see
// Hooks.Track).
func (s *Store) tracker() func(error) {
	if s.hooks.Track == nil {
		return noTrack
	}
	return s.hooks.Track()
}

// startCall decides whether a call may start: it takes a place among the
// running calls, refused past maxRunning while the store fails (a direct
// call takes none).
func (s *Store) startCall() error {
	if s.direct {
		return nil
	}
	// Take a place among the running calls first, then look: two
	// callers can never both take the last place.
	if n := s.running.Add(1); n > maxRunning && s.failing.Load() {
		s.running.Add(-1)
		return fmt.Errorf("%w: Redis has not answered, %d calls still wait for it; not starting another", ErrTimeout, n-1)
	}
	return nil
}

// runWithin runs call on tctx: directly for a client that honours
// deadlines, else in a watchdog goroutine left behind past the deadline.
func runWithin[T any](tctx context.Context, s *Store, call func(context.Context) (T, error)) result[T] {
	if s.direct {
		v, err := call(tctx)
		return result[T]{v, err}
	}
	return watchdog(tctx, s, call)
}

// timedOut decides whether a failed call ran out of time: its context's
// deadline passed, or the network timed out.
func timedOut(tctx context.Context, err error) bool {
	var netErr net.Error
	return errors.Is(tctx.Err(), context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout()
}

// endCall records how a call ended (err) in the store's failing state and
// hooks, unless the caller's own end cut it, which says nothing about
// Redis.
func (s *Store) endCall(ctx context.Context, err error, done func(error)) {
	if err != nil && ctx.Err() != nil {
		return
	}
	was := s.failing.Swap(err != nil)
	done(err)
	if err != nil {
		s.failed(err)
	}
	if was && err == nil {
		s.RetryAnnouncements()
		if s.hooks.Recovered != nil {
			s.hooks.Recovered()
		}
	}
}

type result[T any] struct {
	v   T
	err error
}

// noTrack is the tracker of a store without one.
func noTrack(error) {}

// watchdog runs call in a goroutine, whose place in s.running the caller
// has taken and which gives it back, and returns its result, or ctx's error
// when ctx ends first: the call then goes on alone.
func watchdog[T any](ctx context.Context, s *Store, call func(context.Context) (T, error)) result[T] {
	done := make(chan result[T], 1)
	go func() {
		defer s.running.Add(-1)
		v, err := call(ctx)
		done <- result[T]{v, err}
	}()
	select {
	case r := <-done:
		return r
	case <-ctx.Done():
		select {
		case r := <-done: // it has just finished
			return r
		default:
			return result[T]{err: ctx.Err()}
		}
	}
}
