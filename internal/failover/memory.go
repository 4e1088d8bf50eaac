package failover

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotagate/quotagate/internal/store"
)

// maxRemembered bounds the pauses a gate remembers for re-assertion: a few
// thousand scopes paused at once is beyond what one fleet's refusals make
// (a pause lives seconds to minutes), and an entry costs a map slot of
// about 150 bytes, so the memory stays under a megabyte whatever the
// refusals. Past it the earliest-ending entries are evicted first: theirs
// is the shortest window a loss could open.
const maxRemembered = 4096

// Remembered is one pause a gate knows in force.
type Remembered struct {
	UntilMs  int64     // the deadline, Unix ms of the Redis TIME that set it
	SeenMs   int64     // a Redis TIME (ms) at which it was known in force
	End      time.Time // when it ends by this process's clock (see Memory)
	Operator bool      // set by Gate.Pause

	epoch uint64    // Memory.epoch when it was first remembered
	heard time.Time // when the feed last named it (Heard; zero: never)
	// on is the identity of the master known to hold the pause
	// (store.Identity): that of its key's master as the memory knew it
	// before it remembered the pause, or after a re-assertion; "" when
	// unknown. The pause may be lost only where its master's identity is
	// another now (see ReassertLost).
	on string
}

// Config is what a Memory needs of its gate.
type Config struct {
	Store *store.Store     // runs the re-assertions and pings the masters
	Now   func() time.Time // this process's clock (the gate's); nil: time.Now
	// Slack bounds every answer's round trip (the gate's StoreTimeout):
	// LostFrom's tolerance of an end measured by this process's clock.
	Slack  time.Duration
	Logger *slog.Logger // receives the re-assertions that moved a deadline; nil: slog.Default
	// Moved, when set, is called with the pause key of every pause a
	// re-assertion moved (the gate's open cache asks Redis about the scope).
	Moved func(key string)
}

// Memory is what a gate remembers of the pauses in force, by pause key.
// A nil *Memory remembers nothing; the zero value remembers but has no
// store, so only a Memory from New may re-assert (Recheck, Recovered).
type Memory struct {
	store *store.Store
	now   func() time.Time
	slack time.Duration
	log   *slog.Logger
	moved func(key string)

	mu sync.Mutex
	m  map[string]Remembered

	// The re-assertion of what may be lost (ReassertLost).
	want    bool      // asked for while a run was under way
	running bool      // a run is under way
	last    time.Time // when the last run began
	closed  bool      // the gate is closed: no new run

	// probing is set while the timers that probe the remembered pauses'
	// masters run (see ProbeEvery); turn counts the probes, which take
	// the masters in turn, and again names a key whose master's probe
	// failed, probed again next.
	probing bool
	turn    int
	again   string

	// ids holds the identity (store.Identity) of each master address
	// ("" for a client of one server) as last read, "" when the master
	// does not tell: a pause remembered on a master of a known identity is
	// re-asserted only once that master's identity changes.
	ids map[string]string

	reasserted atomic.Int64 // deadlines the re-assertions moved (tests)
	runs       atomic.Int64 // runs of ReassertLost ended (tests)

	// epoch counts the times the store may have changed masters (it
	// answered after failing, or the feed caught up after a gap): only a
	// pause remembered before the current epoch is measured by this
	// process's clock (LostFrom's relative test, and the remaining time
	// the re-assertion proposes); within one epoch the deadlines are all
	// of one master's clock, and only they count.
	epoch uint64

	// namedSince: a remembered pause the feed has not named since is
	// announced again by the next re-assertion run (Reannounce).
	namedSince time.Time
}

// New returns the memory of a gate configured by c.
func New(c Config) *Memory {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return &Memory{store: c.Store, now: c.Now, slack: c.Slack, log: c.Logger, moved: c.Moved}
}

// Changed starts a new epoch: the store may have changed masters.
func (m *Memory) Changed() {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.epoch++
	m.mu.Unlock()
}

// since reports whether e was remembered before the current epoch.
func (m *Memory) since(e Remembered) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return e.epoch < m.epoch
}

// Note remembers that the pause of key is in force until untilMs, per a
// Redis TIME nowMs read in an answer received at recv by this process's
// clock. A later deadline and a later end win over what is remembered.
func (m *Memory) Note(key string, untilMs, nowMs int64, recv time.Time, operator bool) {
	if m == nil || untilMs <= nowMs {
		return
	}
	end := recv.Add(time.Duration(untilMs-nowMs) * time.Millisecond)
	addr, named := m.masterOf(key) // before the lock: a cluster client may load its layout
	m.mu.Lock()
	defer m.mu.Unlock()
	on, known := m.ids[addr]
	if !named {
		on, known = "", false
	}
	if e, ok := m.m[key]; ok {
		m.m[key] = e.later(untilMs, nowMs, end, operator, on)
		return
	}
	if m.m == nil {
		m.m = make(map[string]Remembered)
	}
	if len(m.m) >= maxRemembered && !m.evict(recv, end) {
		return
	}
	m.m[key] = Remembered{UntilMs: untilMs, SeenMs: nowMs, End: end, Operator: operator, epoch: m.epoch, on: on}
	if !known && m.again == "" {
		m.again = key // the next probe reads the identity of its master
	}
	if !m.probing && !m.closed && m.store != nil {
		m.probing = true
		first := ProbeEvery
		if !known {
			first = 0 // learn the master's identity now: what is remembered after it is vouched for
		}
		time.AfterFunc(first, m.probeMasters) // a timer, not a sleeping goroutine, between probes
	}
}

// later is e as a later note of it says: a later deadline (held by the
// master of identity on), a later Redis TIME and a later end win.
func (e Remembered) later(untilMs, nowMs int64, end time.Time, operator bool, on string) Remembered {
	if untilMs > e.UntilMs {
		e.UntilMs, e.Operator, e.on = untilMs, operator, on
	}
	e.SeenMs = max(e.SeenMs, nowMs)
	if end.After(e.End) {
		e.End = end
	}
	return e
}

// masterOf is the address of the master of key as the store's client
// knows it (store.MasterOf); named is false when it cannot tell.
func (m *Memory) masterOf(key string) (addr string, named bool) {
	if m.store == nil {
		return "", false
	}
	return m.store.MasterOf(key)
}

// learn records the identity id that the master at addr answered.
func (m *Memory) learn(addr, id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ids == nil {
		m.ids = make(map[string]string)
	}
	m.ids[addr] = id
}

// known reports whether the identity of the master at addr was read.
func (m *Memory) known(addr string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.ids[addr]
	return ok
}

// vouch records that the pause of key, as e remembered it, is held by the
// master of identity id (it was there, or was re-asserted there), unless
// it was forgotten or replaced meanwhile.
func (m *Memory) vouch(key string, e Remembered, id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.m[key]; ok && cur.UntilMs == e.UntilMs {
		cur.on = id
		m.m[key] = cur
	}
}

// evict makes room for an entry ending at end: it drops the entries ended
// by now, and if none had, the earliest-ending one, unless the new entry
// ends earlier still (then it reports false: do not remember it).
func (m *Memory) evict(now, end time.Time) bool {
	for k, e := range m.m {
		if !e.End.After(now) {
			delete(m.m, k)
		}
	}
	if len(m.m) < maxRemembered {
		return true
	}
	first, at := "", time.Time{}
	for k, e := range m.m {
		if first == "" || e.End.Before(at) {
			first, at = k, e.End
		}
	}
	if !end.After(at) {
		return false
	}
	delete(m.m, first)
	return true
}

// Get returns the pause of key if it is remembered and has not ended by
// now (this process's clock).
func (m *Memory) Get(key string, now time.Time) (Remembered, bool) {
	if m == nil {
		return Remembered{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.m[key]
	if ok && !e.End.After(now) {
		delete(m.m, key)
		ok = false
	}
	return e, ok
}

// Drop forgets the pause of key: its scope was resumed.
func (m *Memory) Drop(key string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, key)
}

// size is how many pauses are remembered, ended ones included.
func (m *Memory) size() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.m)
}

// inForce returns the remembered pauses that have not ended by now, and
// forgets those that have.
func (m *Memory) inForce(now time.Time) map[string]Remembered {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]Remembered, len(m.m))
	for k, e := range m.m {
		if e.End.After(now) {
			out[k] = e
		} else {
			delete(m.m, k)
		}
	}
	return out
}

// Reasserted is how many deadlines the re-assertions moved (tests).
func (m *Memory) Reasserted() int64 {
	if m == nil {
		return 0
	}
	return m.reasserted.Load()
}

// Runs is how many runs of ReassertLost have ended (tests).
func (m *Memory) Runs() int64 {
	if m == nil {
		return 0
	}
	return m.runs.Load()
}

// Close stops the re-assertions and probes of a closed gate.
func (m *Memory) Close() {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
}
