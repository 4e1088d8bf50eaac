package local

import (
	"hash/maphash"
	"sync"
)

// SlotWakers wake the workers of this process that wait for a slot of a
// concurrency limit when a lease of their scope is released here: one
// worker per unit released, at once, instead of at its next poll
// (concurrentPoll, which finds the slots other processes release). The
// scopes share wakerShards channels by hash, so the memory is bounded
// whatever the number of accounts; a wake taken by a worker of another
// scope of the same shard costs that worker one round trip, and this one
// its poll.
type SlotWakers struct {
	seed maphash.Seed
	once sync.Once
	ch   [wakerShards]chan struct{}
}

// wakerShards is how many channels the scopes share: far more than the
// scopes a process waits on at once, so that wakes seldom go astray.
const wakerShards = 256

// Of is the channel a release of scope k wakes a waiting worker by: a
// worker waits for a slot by receiving from it, bounded by a timer and
// its context.
func (w *SlotWakers) Of(k string) <-chan struct{} { return w.of(k) }

func (w *SlotWakers) of(k string) chan struct{} {
	w.once.Do(func() {
		w.seed = maphash.MakeSeed()
		for i := range w.ch {
			w.ch[i] = make(chan struct{}, 1)
		}
	})
	return w.ch[maphash.String(w.seed, k)%wakerShards]
}

// Wake wakes up to n workers waiting for a slot of scope k (one may be
// woken later, by the channel's buffer: it asks once more).
func (w *SlotWakers) Wake(k string, n int) {
	ch := w.of(k)
	for range n {
		select {
		case ch <- struct{}{}:
		default:
			return
		}
	}
}
