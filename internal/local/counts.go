package local

import (
	"sync"
	"time"
)

// Uncounted counts, per scope, the admissions this process made without a
// round trip, which no script saw, and when the first of them was: the
// next round trip of the scope (an admission or a refusal) reports them,
// so what the scope learns counts every request it sent, from the first
// (see internal/model, learnState.report: a scope no script ever saw
// begins its first cycle at the first of them). A count is removed when
// taken, and given back when its round trip fails; past maxUncounted
// scopes the counts are dropped (a scope's learning then undercounts,
// which its next refusal-free window corrects). A count whose first
// admission is Span old begins again, as the scope's records forget a
// cycle that old. The count of a scope whose entry the feed brings
// (Gate.heard) is reported at once, apart from any admission
// (model.ReportScript): a pause ends the cycle the count belongs to, and
// the learned limit the pause taught takes the count only while the
// pause lasts, before the scope's next round trip; a resume drops it, as
// it forgets what it would teach.
type Uncounted struct {
	// Span is how long a count may run before it begins again (the
	// model's LearnTTL); 0: it never does.
	Span time.Duration

	mu sync.Mutex
	m  map[string]Count // pause key → its count
}

// Count is a scope's uncounted admissions: N of them, the first at First.
type Count struct {
	N     int64
	First time.Time
}

// Age is how long before now the first of c was admitted, 0 when c is
// empty.
func (c Count) Age(now time.Time) time.Duration {
	if c.N <= 0 {
		return 0
	}
	return max(now.Sub(c.First), 0)
}

// maxUncounted bounds the scopes with counts waiting for a round trip:
// far more than a process admits without one between two of their round
// trips, few enough to be nothing in memory.
const maxUncounted = 10_000

// Add counts c (n admissions from c.First on) for the scope of pause key k:
// an admission made without a round trip, or a failed round trip's count
// given back.
func (u *Uncounted) Add(k string, c Count) {
	if c.N <= 0 {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	old, ok := u.m[k]
	switch {
	case !ok && len(u.m) >= maxUncounted:
		clear(u.m)
	case ok && u.Span > 0 && c.First.Sub(old.First) >= u.Span:
		ok = false // a cycle that old is forgotten: begin again
	}
	if u.m == nil {
		u.m = make(map[string]Count)
	}
	if ok {
		c.N += old.N
		if old.First.Before(c.First) {
			c.First = old.First
		}
	}
	u.m[k] = c
}

// Take removes and returns the count of k, for the round trip that
// reports it.
func (u *Uncounted) Take(k string) Count {
	u.mu.Lock()
	defer u.mu.Unlock()
	c := u.m[k]
	delete(u.m, k)
	return c
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
