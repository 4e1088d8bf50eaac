package feed

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotagate/quotagate/internal/schema"

	"github.com/redis/go-redis/v9"
)

// Config configures a Reader.
type Config struct {
	// Client is the Redis the gates write the feed to.
	Client redis.UniversalClient
	// Prefix is the gates' key prefix (Config.Prefix of quotagate).
	Prefix string
	// Interval is the time between polls. Default 100 ms.
	Interval time.Duration
	// Now is the process's clock, which dates the polls (Fresh).
	// Default time.Now.
	Now func() time.Time
	// Heard takes every entry read, in the order of its group's log, and
	// the pauses of a snapshot, with when they were read.
	Heard func(e Entry, recv time.Time)
	// Reset is called with false when the reader goes stale (a poll
	// failed, or none succeeded for Retain/2): what the feed vouched for
	// must be forgotten; and with true when it caught up again from a
	// snapshot, whose pauses Heard took first.
	Reset func(live bool)
	// Failed hears every failed poll's error.
	Failed func(error)
	// Settle is how long after a snapshot that ends a gap the reader is
	// not fresh (Fresh). Default Settle.
	Settle time.Duration
}

// Settle is how long a reader that caught up after a gap stays not
// fresh, so that its gate still asks Redis about every scope: the
// pauses recorded in the gap whose entries a failed master refused or
// lost are in force, but in no snapshot until their writer's store
// appends them again (once Redis answers it) or its failover memory
// announces them again (once its own feed caught up: the gates'
// snapshots of one recovery come within an interval or two of each
// other, and a writer's re-assertions of the pauses it remembers take a
// round trip each). A second covers both on the fan-out benchmark's
// failover (BenchmarkFanout/replicated/failover, docs/measurements.md).
// A reader's first snapshot, at start, has no gap behind it and is
// trusted at once. A snapshot that Resync asked for settles too: through a
// failover a gate's store may recover after its feed did, and its Resync
// reloads a snapshot the writers' appends have not reached either (a
// variant that trusted those at once exposed pauses again in the same
// benchmark). The cost: after a store call that failed, however briefly,
// the gate asks Redis about every scope for a second.
const Settle = time.Second

// pollCount is the most entries one XREAD returns of a log; a log with
// more is read again at once.
const pollCount = 1000

// pollTimeout bounds one poll or snapshot: a Redis that does not answer
// within it has the reader stale long before (Fresh), and the poll is
// tried again.
const pollTimeout = time.Second

// A Reader follows the feed under a prefix for one process (see the
// package doc). Start it on first use; Close it when done.
type Reader struct {
	cfg   Config
	logs  []string // of each group (Groups)
	snaps []string
	asks  []string

	once      sync.Once
	stop      chan struct{}
	done      chan struct{}
	snapshots atomic.Int64

	mu     sync.Mutex
	ok     time.Time // the start of the last poll that succeeded
	live   bool      // caught up from a snapshot, no failure since
	snapAt time.Time // the start of the poll that loaded the last snapshot
	gapped bool      // that snapshot ended a gap (it was not the first): trusted Settle after snapAt
	resync bool      // the next round loads the snapshot (Resync)
	ids    []string  // the last entry read of each log
}

// NewReader returns a reader of the feed under cfg.Prefix, not yet
// started.
func NewReader(cfg Config) *Reader {
	if cfg.Interval <= 0 {
		cfg.Interval = 100 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Settle <= 0 {
		cfg.Settle = Settle
	}
	n := Groups(cfg.Client)
	r := &Reader{cfg: cfg, stop: make(chan struct{}), done: make(chan struct{}), logs: make([]string, n), snaps: make([]string, n),
		asks: make([]string, n)}
	for g := range n {
		r.logs[g], r.snaps[g], r.asks[g] = schema.FeedKeys(cfg.Prefix, g)
	}
	return r
}

// Start starts the polls, once; later calls do nothing.
func (r *Reader) Start() {
	r.once.Do(func() { go r.run() })
}

// Fresh reports whether the reader is caught up, its last poll that
// succeeded began within two intervals, and, when its last snapshot
// ended a gap, that snapshot is Settle old (Config.Settle).
func (r *Reader) Fresh() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.cfg.Now()
	return r.live && now.Sub(r.ok) < 2*r.cfg.Interval && !(r.gapped && now.Sub(r.snapAt) < r.cfg.Settle)
}

// Lag is the time since the start of the last poll that succeeded, or
// -1 when none did since the reader started or last went stale.
func (r *Reader) Lag() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.live {
		return -1
	}
	return r.cfg.Now().Sub(r.ok)
}

// Snapshots is how many snapshots the reader loaded: one at start, one
// after each gap.
func (r *Reader) Snapshots() int64 { return r.snapshots.Load() }

// LastSnapshot is when the poll that loaded the last snapshot began (zero
// before the first): every pause that snapshot named was heard at or
// after it.
func (r *Reader) LastSnapshot() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.snapAt
}

// Close stops the polls and waits for the last to end.
func (r *Reader) Close() {
	r.once.Do(func() { close(r.done) }) // never started
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	<-r.done
}

// run polls every interval until Close, or until the client is closed (a
// gate never closed leaves no reader behind).
func (r *Reader) run() {
	defer close(r.done)
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		if err := r.round(); errors.Is(err, redis.ErrClosed) {
			return
		}
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
	}
}

// round is one poll, or a snapshot when the reader is not caught up.
func (r *Reader) round() error {
	ctx, cancel := context.WithTimeout(context.Background(), pollTimeout)
	defer cancel()
	began := r.cfg.Now()
	r.mu.Lock()
	catchUp := !r.live || r.resync || began.Sub(r.ok) >= Retain/2
	r.resync = false
	r.mu.Unlock()
	if catchUp {
		r.stale()
		return r.finish(began, r.snapshot(ctx), true)
	}
	return r.finish(began, r.poll(ctx), false)
}

// Resync has the next round load the snapshot, as after a gap: the gate
// calls it when a master may have changed (its store recovered from a
// failure), since a new master may have lost entries the reader read, and
// give the next ones IDs below them.
func (r *Reader) Resync() {
	r.mu.Lock()
	r.resync = true
	r.mu.Unlock()
}

// stale makes the reader stale, telling Reset once.
func (r *Reader) stale() {
	r.mu.Lock()
	was := r.live
	r.live = false
	r.mu.Unlock()
	if was && r.cfg.Reset != nil {
		r.cfg.Reset(false)
	}
}

// finish records how the round that began at began ended, and returns
// its error: a failure makes the reader stale, a snapshot loaded makes it
// live.
func (r *Reader) finish(began time.Time, err error, snapshot bool) error {
	if err != nil {
		r.stale()
		if r.cfg.Failed != nil && !errors.Is(err, redis.ErrClosed) {
			r.cfg.Failed(err)
		}
		return err
	}
	r.mu.Lock()
	r.ok = began
	r.live = r.live || snapshot
	if snapshot {
		r.snapAt, r.gapped = began, r.snapshots.Load() > 0
	}
	r.mu.Unlock()
	if snapshot {
		r.snapshots.Add(1)
		if r.cfg.Reset != nil {
			r.cfg.Reset(true)
		}
	}
	return nil
}

// poll reads every log from the entry last read, again at once for the
// logs that had more than pollCount.
func (r *Reader) poll(ctx context.Context) error {
	for range 8 {
		more, err := r.pollOnce(ctx)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// pollOnce is one read of every log; more: a log had pollCount entries.
func (r *Reader) pollOnce(ctx context.Context) (more bool, err error) {
	r.mu.Lock()
	ids := slices.Clone(r.ids)
	r.mu.Unlock()
	var streams []redis.XStream
	if len(r.logs) == 1 {
		streams, err = r.readOne(ctx, ids[0])
	} else {
		streams, err = r.readEach(ctx, ids)
	}
	if err != nil {
		return false, err
	}
	recv := r.cfg.Now()
	for _, st := range streams {
		g := r.groupOf(st.Stream)
		if g < 0 || len(st.Messages) == 0 {
			continue
		}
		for _, m := range st.Messages {
			if e, ok := entryOf(m); ok {
				r.heard(e, recv)
			}
		}
		r.mu.Lock()
		r.ids[g] = st.Messages[len(st.Messages)-1].ID
		r.mu.Unlock()
		more = more || len(st.Messages) >= pollCount
	}
	return more, nil
}

// readOne reads the log of a single node's one group.
func (r *Reader) readOne(ctx context.Context, id string) ([]redis.XStream, error) {
	st, err := r.cfg.Client.XRead(ctx, &redis.XReadArgs{Streams: []string{r.logs[0], id}, Count: pollCount, Block: -1}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return st, err
}

// readEach reads every log with an XREAD of its own, pipelined: one
// round trip per node (a Cluster's command reads the keys of one slot).
func (r *Reader) readEach(ctx context.Context, ids []string) ([]redis.XStream, error) {
	pipe := r.cfg.Client.Pipeline()
	cmds := make([]*redis.XStreamSliceCmd, len(r.logs))
	for g := range r.logs {
		cmds[g] = pipe.XRead(ctx, &redis.XReadArgs{Streams: []string{r.logs[g], ids[g]}, Count: pollCount, Block: -1})
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	var out []redis.XStream
	for _, c := range cmds {
		st, err := c.Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		out = append(out, st...)
	}
	return out, nil
}

// heard hands e to Heard.
func (r *Reader) heard(e Entry, recv time.Time) {
	if r.cfg.Heard != nil && e.Key != "" {
		r.cfg.Heard(e, recv)
	}
}

// groupOf is the group whose log is key, or -1.
func (r *Reader) groupOf(key string) int {
	for g, log := range r.logs {
		if log == key {
			return g
		}
	}
	return -1
}

// snapshotScript reads a group's snapshot, its asks and the ID of its
// log's last entry at one instant: the reader then reads the log from
// that ID, so that whatever was appended after the snapshot is read from
// the log.
//
// KEYS[1] log  KEYS[2] snapshot  KEYS[3] asks
// ARGV[1] AskRetain ms
// returns: {Redis TIME ms, the last entry's ID ("0-0": none), {each pause
// key waiting and its deadline ms}, {each pause key asked and its entry's
// time ms}}
var snapshotScript = redis.NewScript(snapshotSource)

const snapshotSource = `
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local waiting = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. string.format('%.0f', now_ms), '+inf', 'WITHSCORES')
local asked = redis.call('ZRANGEBYSCORE', KEYS[3], string.format('%.0f', now_ms - tonumber(ARGV[1])), '+inf', 'WITHSCORES')
return {string.format('%.0f', now_ms), last[1] and last[1][1] or '0-0', waiting, asked}
`

// snapshot loads every group's snapshot, its pauses and asks heard, and
// sets the IDs the logs are read from.
func (r *Reader) snapshot(ctx context.Context) error {
	pipe := r.cfg.Client.Pipeline()
	cmds := make([]*redis.Cmd, len(r.logs))
	for g := range r.logs {
		cmds[g] = snapshotScript.Eval(ctx, pipe, []string{r.logs[g], r.snaps[g], r.asks[g]}, AskRetain.Milliseconds())
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	ids := make([]string, len(r.logs))
	var heard []Entry
	for g, c := range cmds {
		id, es, err := snapshotOf(c.Val())
		if err != nil {
			return err
		}
		ids[g], heard = id, append(heard, es...)
	}
	recv := r.cfg.Now()
	for _, e := range heard {
		r.heard(e, recv)
	}
	r.mu.Lock()
	r.ids = ids
	r.mu.Unlock()
	return nil
}

// snapshotOf decodes snapshotScript's reply: the pauses waiting, as
// entries of their deadline, then the other scopes asked, as entries that
// name them with neither a deadline nor a resume (a scope that must ask
// Redis), their time their entry's.
func snapshotOf(v any) (id string, heard []Entry, err error) {
	list, ok := v.([]any)
	if !ok || len(list) != 4 {
		return "", nil, fmt.Errorf("quotagate: unexpected feed snapshot %v", v)
	}
	s0, ok0 := list[0].(string)
	id, ok1 := list[1].(string)
	now, err := strconv.ParseInt(s0, 10, 64)
	if !ok0 || !ok1 || err != nil {
		return "", nil, fmt.Errorf("quotagate: unexpected feed snapshot %v", v)
	}
	waiting, err := scoredOf(list[2])
	if err != nil {
		return "", nil, err
	}
	paused := make(map[string]bool, len(waiting))
	for _, w := range waiting {
		heard = append(heard, Entry{Key: w.key, UntilMs: w.score, NowMs: now, Version: schema.FeedVersion})
		paused[w.key] = true
	}
	asked, err := scoredOf(list[3])
	if err != nil {
		return "", nil, err
	}
	for _, a := range asked {
		if !paused[a.key] { // its pause names it already
			heard = append(heard, Entry{Key: a.key, NowMs: a.score, Version: schema.FeedVersion})
		}
	}
	return id, heard, nil
}

// scored is a member of a sorted set and its score.
type scored struct {
	key   string
	score int64
}

// scoredOf decodes a ZRANGE ... WITHSCORES reply.
func scoredOf(v any) ([]scored, error) {
	list, ok := v.([]any)
	if !ok || len(list)%2 != 0 {
		return nil, fmt.Errorf("quotagate: unexpected feed snapshot set %v", v)
	}
	out := make([]scored, 0, len(list)/2)
	for i := 0; i < len(list); i += 2 {
		k, ok1 := list[i].(string)
		sc, ok2 := list[i+1].(string)
		f, err := strconv.ParseFloat(sc, 64)
		if !ok1 || !ok2 || err != nil {
			return nil, fmt.Errorf("quotagate: unexpected feed snapshot member %v %v", list[i], list[i+1])
		}
		out = append(out, scored{key: k, score: int64(f)})
	}
	return out, nil
}

// Owns reports whether cmd is one of the feed's own reads (a poll or a
// snapshot), for a hook that counts what else a gate asks of Redis.
func Owns(cmd redis.Cmder) bool {
	args := cmd.Args()
	switch cmd.Name() {
	case "xread":
		return true // the gates read no other stream
	case "eval":
		return len(args) > 1 && args[1] == snapshotSource
	case "evalsha":
		return len(args) > 1 && args[1] == snapshotScript.Hash()
	}
	return false
}

// CommandName is cmd's name, or "feed" for the feed's own reads (Owns):
// a name for a hook that counts commands by name.
func CommandName(cmd redis.Cmder) string {
	if Owns(cmd) {
		return "feed"
	}
	return cmd.Name()
}

// Entries returns the entries every log under prefix holds now (the last
// Retain of them), group by group: what a reader starting from nothing
// would read, for tests and operators.
func Entries(ctx context.Context, rdb redis.UniversalClient, prefix string) ([]Entry, error) {
	var out []Entry
	for g := range Groups(rdb) {
		log, _, _ := schema.FeedKeys(prefix, g)
		ms, err := rdb.XRange(ctx, log, "-", "+").Result()
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			if e, ok := entryOf(m); ok {
				out = append(out, e)
			}
		}
	}
	return out, nil
}
