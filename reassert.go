package quotagate

// Re-assertion: the bounded promise of a pause through a failover.
//
// Redis replicates asynchronously. A master that dies after it answered a
// refusal script, before its replica had the write, takes the pause with
// it: the promoted replica has no deadline for the scope, or an earlier
// one, and admits requests into a window the provider closed. Config.Durable
// closes that gap at the price of a WAIT per pause; without it, the default,
// the gates close it themselves:
//
//   - A gate remembers the pauses in force that it recorded, that it saw
//     announced (every pause is announced on <prefix>:paused with its
//     deadline and the Redis TIME it was set at), and that its admissions
//     read, as the absolute deadline in ms of Redis TIME, the Redis TIME it
//     was known in force at, and when it ends by this process's monotonic
//     clock (the instant the answer arrived plus the remaining time it
//     stated: never earlier than the true end, later by at most the
//     answer's transit). At most maxRemembered of them, the earliest-ending
//     evicted first; an entry is dropped when it ends, or when the scope is
//     resumed.
//   - An admission whose answer says that a remembered deadline is absent
//     or earlier (lostFrom) re-asserts it before anything is sent: the
//     monotonic pause transition with the remembered deadline (never moving
//     a deadline earlier, idempotent), then asks again, so the task is
//     deferred as any task of a paused scope.
//   - When the store answers again after failing, or the subscription to
//     the announcements comes back after an error (a master changed, in
//     most failovers), every remembered deadline is re-asserted at once, at
//     most once per reassertGap: a pause is back within that gap and one
//     round trip per pause of the new master answering, whether or not a
//     task of its scope comes by.
//   - While the store fails, a task of a scope this gate knows paused is
//     deferred until the pause ends, instead of failing open.
//
// The new master's clock. A deadline is an absolute instant of the clock
// of the master that set it, and after a promotion it is compared with the
// new master's TIME: a new master whose clock runs s ahead ends every pause
// in force s early, one that runs s behind ends it s late. Re-assertion
// proposes the later of the remembered deadline and the new master's TIME
// plus the remaining time as this process measured it, so a gate that knew
// a pause restores its true end on a clock that runs ahead (the relative
// test of lostFrom: a scope the new master releases more than StoreTimeout
// before this gate's end is re-asserted); a clock that runs behind lengthens
// the pause by s, which no monotonic pause can undo.
//
// Resume. Gate.Resume records when it lifted the scope (the scope's
// resumed key, for MaxPause) and announces it; a gate forgets the scope
// when it hears that, and the re-assertion script re-asserts nothing known
// in force only before the last resume, so neither a late answer nor a
// missed announcement undoes an operator's Resume.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotagate/quotagate/internal/model"
	"github.com/quotagate/quotagate/internal/schema"
	"github.com/quotagate/quotagate/internal/store"

	"github.com/redis/go-redis/v9"
)

// maxRemembered bounds the pauses a gate remembers for re-assertion: a few
// thousand scopes paused at once is beyond what one fleet's refusals make
// (a pause lives seconds to minutes), and an entry costs a map slot of
// about 150 bytes, so the memory stays under a megabyte whatever the
// refusals. Past it the earliest-ending entries are evicted first: theirs
// is the shortest window a loss could open.
const maxRemembered = 4096

// reassertGap is the least time between two re-assertions of every
// remembered pause: a store that flaps (a slot's master dead while the
// others answer) re-asserts everything at most four times a second.
const reassertGap = 250 * time.Millisecond

// remembered is one pause a gate knows in force.
type remembered struct {
	untilMs  int64     // the deadline, Unix ms of the Redis TIME that set it
	seenMs   int64     // a Redis TIME (ms) at which it was known in force
	end      time.Time // when it ends by this process's clock (see memory)
	operator bool      // set by Gate.Pause
	epoch    uint64    // memory.epoch when it was first remembered
}

// memory is what a gate remembers of the pauses in force, by pause key.
type memory struct {
	mu sync.Mutex
	m  map[string]remembered

	// The re-assertion of everything (reassertAll).
	want    bool      // asked for while a run was under way
	running bool      // a run is under way
	last    time.Time // when the last run began
	closed  bool      // the gate is closed: no new run

	// probing is set while the goroutine that pings the remembered pauses'
	// masters runs (see probeEvery); probe starts it.
	probing bool
	probe   func()

	reasserted atomic.Int64 // deadlines the re-assertions moved (tests)

	// epoch counts the times the store may have changed masters (it
	// answered after failing, or the subscription came back): only a
	// pause remembered before the current epoch is measured by this
	// process's clock (lostFrom's relative test, and the remaining time
	// the re-assertion proposes); within one epoch the deadlines are all
	// of one master's clock, and only they count.
	epoch uint64
}

// changed starts a new epoch: the store may have changed masters.
func (m *memory) changed() {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.epoch++
	m.mu.Unlock()
}

// since reports whether e was remembered before the current epoch.
func (m *memory) since(e remembered) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return e.epoch < m.epoch
}

// note remembers that the pause of key is in force until untilMs, per a
// Redis TIME nowMs read in an answer received at recv by this process's
// clock. A later deadline and a later end win over what is remembered.
func (m *memory) note(key string, untilMs, nowMs int64, recv time.Time, operator bool) {
	if m == nil || untilMs <= nowMs {
		return
	}
	end := recv.Add(time.Duration(untilMs-nowMs) * time.Millisecond)
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.m[key]; ok {
		if untilMs > e.untilMs {
			e.untilMs, e.operator = untilMs, operator
		}
		e.seenMs = max(e.seenMs, nowMs)
		if end.After(e.end) {
			e.end = end
		}
		m.m[key] = e
		return
	}
	if m.m == nil {
		m.m = make(map[string]remembered)
	}
	if len(m.m) >= maxRemembered && !m.evict(recv, end) {
		return
	}
	m.m[key] = remembered{untilMs: untilMs, seenMs: nowMs, end: end, operator: operator, epoch: m.epoch}
	if !m.probing && !m.closed && m.probe != nil {
		m.probing = true
		time.AfterFunc(probeEvery, m.probe) // a timer, not a sleeping goroutine, between probes
	}
}

// evict makes room for an entry ending at end: it drops the entries ended
// by now, and if none had, the earliest-ending one, unless the new entry
// ends earlier still (then it reports false: do not remember it).
func (m *memory) evict(now, end time.Time) bool {
	for k, e := range m.m {
		if !e.end.After(now) {
			delete(m.m, k)
		}
	}
	if len(m.m) < maxRemembered {
		return true
	}
	first, at := "", time.Time{}
	for k, e := range m.m {
		if first == "" || e.end.Before(at) {
			first, at = k, e.end
		}
	}
	if !end.After(at) {
		return false
	}
	delete(m.m, first)
	return true
}

// get returns the pause of key if it is remembered and has not ended by
// now (this process's clock).
func (m *memory) get(key string, now time.Time) (remembered, bool) {
	if m == nil {
		return remembered{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.m[key]
	if ok && !e.end.After(now) {
		delete(m.m, key)
		ok = false
	}
	return e, ok
}

// drop forgets the pause of key: its scope was resumed.
func (m *memory) drop(key string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, key)
}

// size is how many pauses are remembered, ended ones included.
func (m *memory) size() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.m)
}

// inForce returns the remembered pauses that have not ended by now, and
// forgets those that have.
func (m *memory) inForce(now time.Time) map[string]remembered {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]remembered, len(m.m))
	for k, e := range m.m {
		if e.end.After(now) {
			out[k] = e
		} else {
			delete(m.m, k)
		}
	}
	return out
}

// lostFrom reports whether the admission answer a, received at recv by
// this process's clock, says that the remembered pause e is absent or
// earlier: the scope is held until before e's deadline (on the clock that
// set it), or, by this process's clock, ends more than slack before e
// does (the new master's clock runs ahead of the old one's). Without a
// failover neither holds: the deadline in force is at least e's, and an
// answer's end by this clock is early by at most its transit, below slack
// (StoreTimeout, which bounds every answer's round trip).
//
// The relative test applies only with otherClock set: the pause was
// remembered before the store last recovered (memory.since).
func (e remembered) lostFrom(a admission, recv time.Time, slack time.Duration, otherClock bool) bool {
	heldUs := a.nowMicros // open: held until now
	if a.code == model.Paused {
		heldUs += a.wait.Microseconds()
	}
	if e.untilMs*1000 > heldUs {
		return true
	}
	if !otherClock {
		return false
	}
	ends := recv.Add(time.Duration(heldUs-a.nowMicros) * time.Microsecond)
	return e.end.Sub(ends) > slack
}

// probeEvery is how often a gate that remembers a pause in force pings
// the masters that hold the remembered pauses (one PING per master, of a
// cluster's the masters of their slots), whether or not it has tasks of
// their scopes: a gate with nothing else to ask the store thus notices a
// dead master, has a cluster client reload its layout (internal/store's
// topology.go), and re-asserts its pauses when the new master answers,
// within about a second of the promotion. It stops when nothing is
// remembered.
const probeEvery = time.Second

// probeMasters pings the masters of the remembered pauses, then again
// probeEvery later while there are any (memory.probe; a timer between
// two, so that no goroutine waits meanwhile).
func (g *Gate) probeMasters() {
	m := g.mem
	m.mu.Lock()
	if m.closed || len(m.m) == 0 {
		m.probing = false
		m.mu.Unlock()
		return
	}
	keys := make([]string, 0, len(m.m))
	for k := range m.m {
		keys = append(keys, k)
	}
	m.mu.Unlock()
	if errors.Is(g.store.PingMasters(context.Background(), keys), redis.ErrClosed) { // the client is closed: nothing to watch any more
		m.mu.Lock()
		m.probing = false
		m.mu.Unlock()
		return
	}
	time.AfterFunc(probeEvery, g.probeMasters)
}

// reassertion is the remembered pause e as the store re-asserts it, at
// now by this process's clock: with the time it has left by this clock
// when it may be of another master's clock (memory.since), else its
// deadline alone, on the clock that set it.
func (g *Gate) reassertion(e remembered, now time.Time) store.Reassertion {
	r := store.Reassertion{UntilMs: e.untilMs, SeenMs: e.seenMs, Operator: e.operator}
	if g.mem.since(e) {
		r.Left = e.end.Sub(now)
	}
	return r
}

// reassertOne re-asserts the remembered pause e of key and remembers what
// is in force after it.
func (g *Gate) reassertOne(ctx context.Context, key string, e remembered) (store.Reasserted, error) {
	r, err := g.store.Reassert(ctx, key, g.reassertion(e, g.now()))
	if err != nil {
		return r, err
	}
	recv := g.now()
	switch {
	case r.Resumed:
		g.mem.drop(key)
	case r.Moved:
		g.open.forget(key)
		g.mem.reasserted.Add(1)
		g.mem.note(key, r.Until.UnixMilli(), r.NowMs, recv, e.operator)
		g.cfg.Logger.Warn("quotagate: a pause the store had lost is in force again (re-asserted)",
			"key", key, "until", r.Until, "remembered", time.UnixMilli(e.untilMs))
	}
	return r, nil
}

// reassertAll asks for the re-assertion of every remembered pause: now,
// or reassertGap after the last run began if that is later, in a goroutine
// of its own. A request during a run makes one more run after it.
func (g *Gate) reassertAll() {
	m := g.mem
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || len(m.m) == 0 && !m.running {
		return
	}
	if m.running {
		m.want = true
		return
	}
	m.running = true
	go g.reassertRuns()
}

// reassertRuns re-asserts every remembered pause, again while more runs
// were asked for meanwhile. A run stops at the first store error: the
// store's recovery asks for the next.
func (g *Gate) reassertRuns() {
	m := g.mem
	for {
		m.mu.Lock()
		wait := m.last.Add(reassertGap).Sub(g.now())
		m.mu.Unlock()
		if wait > 0 {
			time.Sleep(wait)
		}
		m.mu.Lock()
		m.want, m.last = false, g.now()
		m.mu.Unlock()
		for key, e := range m.inForce(g.now()) {
			if _, err := g.reassertOne(context.Background(), key, e); err != nil {
				break
			}
		}
		m.mu.Lock()
		if !m.want || m.closed {
			m.running = false
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
	}
}

// recheck applies the remembered pause of k to the admission answer a,
// received at recv: when a says the pause is absent or earlier, it is
// re-asserted and again is set (ask again: the scope is paused). When the
// re-assertion fails, known is the remembered pause as an answer (defer).
func (g *Gate) recheck(ctx context.Context, k schema.Keys, a admission, recv time.Time) (again bool, known *admission) {
	e, ok := g.mem.get(k.Pause, recv)
	if !ok || !e.lostFrom(a, recv, g.cfg.StoreTimeout, g.mem.since(e)) {
		return false, nil
	}
	r, err := g.reassertOne(ctx, k.Pause, e)
	if err != nil {
		kp, _ := g.knownPause(k, g.now())
		return false, &kp
	}
	return !r.Resumed, nil
}

// knownPause returns, as an admission answer at now, the pause of k this
// gate remembers in force, if any: what the store would answer had it not
// lost or failed it.
func (g *Gate) knownPause(k schema.Keys, now time.Time) (admission, bool) {
	e, ok := g.mem.get(k.Pause, now)
	if !ok {
		return admission{}, false
	}
	wait := e.end.Sub(now)
	return admission{code: model.Paused, reason: model.ReasonPause, wait: wait, until: now.Add(wait), now: now, byOperator: e.operator}, true
}

// noteAnswer remembers the pause an admission answer a (received at recv)
// says is in force.
func (g *Gate) noteAnswer(k schema.Keys, a admission) {
	if a.code == model.Paused && a.reason == model.ReasonPause && a.untilDeadline > 0 {
		g.mem.note(k.Pause, a.untilDeadline, a.nowMicros/1000, g.now(), a.byOperator)
	}
}

// announcement is one message on the gate's channel: a pause key, and,
// for a pause, its deadline and the Redis TIME it was set at (ms), or that
// the scope was resumed. A message of the pause key alone (a budget
// observed) carries neither.
type announcement struct {
	key            string
	untilMs, nowMs int64
	resumed        bool
}

// parseAnnouncement parses the payload of a message on the gate's channel:
// "<pause key>", "<pause key> <deadline ms> <now ms>" or "<pause key>
// resumed". A pause key ends with ":pause", which no escaped scope
// contains otherwise.
func parseAnnouncement(payload string) announcement {
	i := strings.LastIndex(payload, ":pause")
	if i < 0 {
		return announcement{key: payload}
	}
	a := announcement{key: payload[:i+len(":pause")]}
	f := strings.Fields(payload[i+len(":pause"):])
	switch {
	case len(f) == 1 && f[0] == "resumed":
		a.resumed = true
	case len(f) == 2:
		u, err1 := strconv.ParseInt(f[0], 10, 64)
		n, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 == nil && err2 == nil {
			a.untilMs, a.nowMs = u, n
		}
	case len(f) != 0:
		return announcement{key: payload}
	}
	return a
}

// heard takes in an announcement received at recv.
func (g *Gate) heard(a announcement, recv time.Time) {
	switch {
	case a.resumed:
		g.mem.drop(a.key)
	case a.untilMs > 0:
		g.mem.note(a.key, a.untilMs, a.nowMs, recv, false)
	}
}

// notePause remembers the pause of k that the store says is in force
// until until, remaining rem by Redis TIME, as the answer arrives.
func (g *Gate) notePause(k schema.Keys, until time.Time, rem time.Duration, operator bool) {
	u := until.UnixMilli()
	g.mem.note(k.Pause, u, u-rem.Milliseconds(), g.now(), operator)
}

// close stops the re-assertions of a closed gate.
func (m *memory) close() {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
}
