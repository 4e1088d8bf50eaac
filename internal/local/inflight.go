package local

import "sync"

// InFlight counts, per scope, the tasks of this process between their
// admission and their end: the level an admission tells its refusal when
// the scope's shared records know none (internal/model's flight.go reads
// it; a fleet's other processes are not counted, so it is a lower bound).
// A scope's entry is removed when its count returns to zero.
type InFlight struct {
	mu sync.Mutex
	m  map[string]int64 // pause key → units in flight
}

// Enter counts n more units of the scope of pause key k in flight and
// returns the count, the entering ones included.
func (f *InFlight) Enter(k string, n int64) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[string]int64{}
	}
	f.m[k] += n
	return f.m[k]
}

// Leave counts n units of the scope of k out of flight.
func (f *InFlight) Leave(k string, n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m[k] -= n; f.m[k] <= 0 {
		delete(f.m, k)
	}
}
