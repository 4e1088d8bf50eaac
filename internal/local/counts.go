package local

import (
	"sync"
	"sync/atomic"
)

// Uncounted counts, per scope, the admissions this process made from its
// open cache, which no script saw: the next round trip of the scope (an
// admission or a refusal) reports them, so what the scope learns counts
// every request it sent (see internal/model, learnState.report). A count
// is removed when taken, and given back when its round trip fails; past
// maxUncounted scopes the counts are dropped (a scope's learning then
// undercounts, which its next refusal-free window corrects). The count
// of a scope whose entry the feed brings (Gate.heard) is reported at
// once, apart from any admission (model.ReportScript): a pause ends the
// cycle the count belongs to, and the learned limit the pause taught
// takes the count only while the pause lasts, before the scope's next
// round trip; a resume drops it, as it forgets what it would teach.
type Uncounted struct {
	m sync.Map // pause key → *atomic.Int64
	n atomic.Int64
}

// maxUncounted bounds the scopes with counts waiting for a round trip:
// far more than a process admits from its cache between two of their
// round trips, few enough to be nothing in memory.
const maxUncounted = 10_000

// Add counts n admissions of the scope of pause key k that no script saw
// (an open cache's, or a failed round trip's given back).
func (c *Uncounted) Add(k string, n int64) {
	if n <= 0 {
		return
	}
	v, ok := c.m.Load(k)
	if !ok {
		if c.n.Load() >= maxUncounted {
			c.m.Clear()
			c.n.Store(0)
		}
		var loaded bool
		if v, loaded = c.m.LoadOrStore(k, new(atomic.Int64)); !loaded {
			c.n.Add(1)
		}
	}
	v.(*atomic.Int64).Add(n)
}

// Take removes and returns the count of k, for the round trip that
// reports it.
func (c *Uncounted) Take(k string) int64 {
	if v, ok := c.m.LoadAndDelete(k); ok {
		c.n.Add(-1)
		return v.(*atomic.Int64).Load()
	}
	return 0
}

// Absorbed counts, per pause (scope and deadline), the refusals of
// requests already on their way when it began, which the log reports at
// DEBUG with this count instead of a line at INFO each. Past
// maxAbsorbedPauses pauses the counts start again.
type Absorbed struct {
	mu sync.Mutex
	n  map[string]int
}

// maxAbsorbedPauses bounds the pauses absorbed counts are kept for: far
// more than are in force at once in one process.
const maxAbsorbedPauses = 1000

// Add counts one more absorbed refusal of pause and returns the count.
func (a *Absorbed) Add(pause string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n == nil || len(a.n) >= maxAbsorbedPauses {
		a.n = make(map[string]int)
	}
	a.n[pause]++
	return a.n[pause]
}
