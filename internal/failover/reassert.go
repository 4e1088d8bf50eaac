package failover

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/quotagate/quotagate/internal/store"

	"github.com/redis/go-redis/v9"
)

// reassertGap is the least time between two runs of ReassertLost: a
// store that flaps (a slot's master dead while the others answer) reads
// its masters' identities at most four times a second.
const reassertGap = 250 * time.Millisecond

// ProbeEvery is how often a Memory that remembers a pause in force probes
// one of the masters that hold the remembered pauses (of a cluster's the
// masters of their slots, in turn; again the same one after a failed
// probe), whether or not its gate has tasks of their scopes: one round
// trip per interval, whatever the number of pauses remembered. A probe is
// a PING, or the read of the master's identity (store.Identity, two INFO
// commands) when the memory does not know it yet. So a gate with nothing else to ask the
// store notices a dead master, has a cluster client reload its layout
// (internal/store's topology.go), and re-asserts what the new master lost
// when it answers (the store's recovery: Recovered), within about a
// second of the promotion once its probe has found the master dead. It
// stops when nothing is remembered.
const ProbeEvery = time.Second

// probeMasters probes one master of the remembered pauses, then again
// ProbeEvery later while there are any (a timer between two, so that no
// goroutine waits meanwhile).
func (m *Memory) probeMasters() {
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
	if errors.Is(m.probe(context.Background(), keys), redis.ErrClosed) { // the client is closed: nothing to watch any more
		m.mu.Lock()
		m.probing = false
		m.mu.Unlock()
		return
	}
	time.AfterFunc(ProbeEvery, m.probeMasters)
}

// probe makes the one round trip of a probe to the master of keys whose turn
// it is (see ProbeEvery), and remembers which to probe again if it fails.
func (m *Memory) probe(ctx context.Context, keys []string) error {
	masters, err := m.store.Masters(ctx, keys)
	if len(masters) == 0 {
		return err
	}
	t := m.target(masters)
	if m.known(t.Addr) {
		err = m.store.Ping(ctx, t)
	} else {
		var id string
		if id, err = m.store.Identity(ctx, t); err == nil {
			m.learn(t.Addr, id)
		}
	}
	m.mu.Lock()
	m.again = ""
	if err != nil {
		m.again = t.Keys[0]
	}
	m.mu.Unlock()
	return err
}

// target is the master to probe: the one that holds the key whose
// master's last probe failed, else the next in turn.
func (m *Memory) target(masters []store.Master) store.Master {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.again != "" {
		for _, ms := range masters {
			if slices.Contains(ms.Keys, m.again) {
				return ms
			}
		}
	}
	m.turn++
	return masters[m.turn%len(masters)]
}

// reassertion is the remembered pause e as the store re-asserts it, at
// now by this process's clock: with the time it has left by this clock
// when it may be of another master's clock (since), else its deadline
// alone, on the clock that set it.
func (m *Memory) reassertion(e Remembered, now time.Time) store.Reassertion {
	r := store.Reassertion{UntilMs: e.UntilMs, SeenMs: e.SeenMs, Operator: e.Operator}
	if m.since(e) {
		r.Left = e.End.Sub(now)
	}
	return r
}

// reassertOne re-asserts the remembered pause e of key and remembers what
// is in force after it; announce: the pause in force is announced even if
// the re-assertion did not move it (Reannounce).
func (m *Memory) reassertOne(ctx context.Context, key string, e Remembered, announce bool) (store.Reasserted, error) {
	ra := m.reassertion(e, m.now())
	ra.Announce = announce
	r, err := m.store.Reassert(ctx, key, ra)
	if err != nil {
		return r, err
	}
	recv := m.now()
	switch {
	case r.Resumed:
		m.Drop(key)
	case r.Moved:
		if m.moved != nil {
			m.moved(key)
		}
		m.reasserted.Add(1)
		m.Note(key, r.Until.UnixMilli(), r.NowMs, recv, e.Operator)
		m.log.Warn("quotagate: a pause the store had lost is in force again (re-asserted)",
			"key", key, "until", r.Until, "remembered", time.UnixMilli(e.UntilMs))
	}
	return r, nil
}

// Recheck applies the remembered pause of key to the admission answer a:
// when a says the pause is absent or earlier (LostFrom), it is
// re-asserted, and again reports whether it is in force again (ask again:
// the scope is paused; false when the scope was resumed meanwhile). err is
// the re-assertion's failure: the caller acts on the pause it remembers.
func (m *Memory) Recheck(ctx context.Context, key string, a Answer) (again bool, err error) {
	e, ok := m.Get(key, a.Recv)
	if !ok || m.store == nil || !e.LostFrom(a, m.slack, m.since(e)) {
		return false, nil
	}
	r, err := m.reassertOne(ctx, key, e, false)
	if err != nil {
		return false, err
	}
	return !r.Resumed, nil
}

// Recovered tells the memory that the store may have changed masters (it
// answered after failing, or the feed caught up after a gap): a new epoch begins, and whatever a new master may
// have lost is re-asserted (ReassertLost).
func (m *Memory) Recovered() {
	m.Changed()
	m.ReassertLost()
}

// ReassertLost asks for the re-assertion of every remembered pause that
// its master may have lost: now, or reassertGap after the last run began
// if that is later, in a goroutine of its own. A request during a run
// makes one more run after it. A run reads the identity of each master of
// the remembered pauses (one call per master: store.Identity) and
// re-asserts only the pauses not known to be on a master of that
// identity: none after a recovery that changed no master (a timeout, a
// poll of the feed failed and made again), where re-asserting them all would
// cost every gate a script per remembered pause for nothing.
func (m *Memory) ReassertLost() {
	if m == nil || m.store == nil {
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
	go m.reassertRuns()
}

// reassertRuns runs reassertLost, again while more runs were asked for
// meanwhile.
func (m *Memory) reassertRuns() {
	for {
		m.mu.Lock()
		wait := m.last.Add(reassertGap).Sub(m.now())
		m.mu.Unlock()
		if wait > 0 {
			time.Sleep(wait)
		}
		m.mu.Lock()
		m.want, m.last = false, m.now()
		m.mu.Unlock()
		m.reassertLost(context.Background())
		m.runs.Add(1)
		m.mu.Lock()
		if !m.want || m.closed {
			m.running = false
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
	}
}

// reassertLost is one run of ReassertLost. It leaves a master at the
// first store error of its calls, and goes on with the next: the store's
// recovery asks for the next run.
func (m *Memory) reassertLost(ctx context.Context) {
	in := m.inForce(m.now())
	keys := make([]string, 0, len(in))
	for k := range in {
		keys = append(keys, k)
	}
	masters, _ := m.store.Masters(ctx, keys) // a key of no known master waits for the next run
	for _, ms := range masters {
		id, err := m.store.Identity(ctx, ms)
		if err == nil && m.reassertOn(ctx, ms.Keys, in, id) {
			m.learn(ms.Addr, id)
		}
	}
}

// reassertOn re-asserts the pauses of keys (remembered as in holds them)
// that a master of identity id may not have ("" says nothing: all of
// them), or whose announcement the feed may have lost (unnamed: those are
// announced again, and count as named from then on), and records that
// they are on it; false at the first error.
func (m *Memory) reassertOn(ctx context.Context, keys []string, in map[string]Remembered, id string) bool {
	for _, k := range keys {
		e := in[k]
		announce := m.unnamed(k)
		if id != "" && e.on == id && !announce {
			continue
		}
		if _, err := m.reassertOne(ctx, k, e, announce); err != nil {
			return false
		}
		if announce {
			m.named(k, m.now())
		}
		if cur, ok := m.Get(k, m.now()); ok {
			m.vouch(k, cur, id)
		}
	}
	return true
}
