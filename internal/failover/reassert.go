package failover

import (
	"context"
	"errors"
	"time"

	"github.com/quotagate/quotagate/internal/store"

	"github.com/redis/go-redis/v9"
)

// reassertGap is the least time between two re-assertions of every
// remembered pause: a store that flaps (a slot's master dead while the
// others answer) re-asserts everything at most four times a second.
const reassertGap = 250 * time.Millisecond

// ProbeEvery is how often a Memory that remembers a pause in force pings
// the masters that hold the remembered pauses (one PING per master, of a
// cluster's the masters of their slots), whether or not its gate has
// tasks of their scopes: a gate with nothing else to ask the store thus
// notices a dead master, has a cluster client reload its layout
// (internal/store's topology.go), and re-asserts its pauses when the new
// master answers, within about a second of the promotion. It stops when
// nothing is remembered.
const ProbeEvery = time.Second

// probeMasters pings the masters of the remembered pauses, then again
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
	if errors.Is(m.store.PingMasters(context.Background(), keys), redis.ErrClosed) { // the client is closed: nothing to watch any more
		m.mu.Lock()
		m.probing = false
		m.mu.Unlock()
		return
	}
	time.AfterFunc(ProbeEvery, m.probeMasters)
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
// is in force after it.
func (m *Memory) reassertOne(ctx context.Context, key string, e Remembered) (store.Reasserted, error) {
	r, err := m.store.Reassert(ctx, key, m.reassertion(e, m.now()))
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
	r, err := m.reassertOne(ctx, key, e)
	if err != nil {
		return false, err
	}
	return !r.Resumed, nil
}

// Recovered tells the memory that the store may have changed masters (it
// answered after failing, or the subscription to the announcements came
// back after an error): a new epoch begins, and every remembered pause is
// re-asserted (ReassertAll).
func (m *Memory) Recovered() {
	m.Changed()
	m.ReassertAll()
}

// ReassertAll asks for the re-assertion of every remembered pause: now,
// or reassertGap after the last run began if that is later, in a goroutine
// of its own. A request during a run makes one more run after it.
func (m *Memory) ReassertAll() {
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

// reassertRuns re-asserts every remembered pause, again while more runs
// were asked for meanwhile. A run stops at the first store error: the
// store's recovery asks for the next.
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
		for key, e := range m.inForce(m.now()) {
			if _, err := m.reassertOne(context.Background(), key, e); err != nil {
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
