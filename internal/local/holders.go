package local

import (
	"sync"
	"time"
)

// Holders counts the workers of this process that wait in-process, per
// scope and in all, so that neither one paced or paused provider nor many
// brief pauses at once can take every worker from the other scopes' tasks
// (the reference article's "do not let one provider freeze every
// integration": tasks of other providers wait in asynq's queue, where no
// worker is left to take them).
//
// A waiter is a worker waiting for its scope in any way: until a slot of a
// limit reserved ahead, for a pause or a window to open (a holder), for a
// slot of a concurrency limit in flight, or on a last attempt. The rule
// (Join): a worker may wait only while fewer than one in holdShare of the
// tasks inside the middleware wait, unless every waiter is of its own
// scope and no task of another scope (or without one) entered the
// middleware within fairFor; beside another scope, while fewer than one in
// holdShare of the process's workers wait (see mayWait): a process that serves one scope alone gives its
// reopening every worker but one in its first fairFor, and but one when
// the waiter asks to keep one free (keep: an interactive task of that very
// scope, queued behind its backlog, needs a free worker to be dequeued at
// all; the gate decides when to ask). (In the first
// fairFor, that no other scope entered yet says nothing: its first tasks
// may all be of one scope, the others' queued behind them, and were every
// worker waiting for that scope, none would be reached but at its pace.
// The one left takes task after task of the queue and meets them.) When a task of
// another scope enters while one scope's waiters are past the share, its
// holders are woken (Crowded) to ask again, and keep to the share. A
// worker that may not wait asks the admission for no slot ahead
// (model.Params.NowOnly) and is deferred to its instant; its worker takes
// the next task of the queue. Last attempts without NewTask's reserve
// wait whatever the count (they join it).
//
// One worker past the rule may wait for interactive work (Want.Interactive),
// one in the whole process: a person's task is dequeued first but only by
// a free worker, and deferred it comes back at asynq's next whole second
// or later, so a person's poll would wait a second behind a scope whose
// waiters are at the share (its first poll, before the reserve of its
// class is known, meets a window its scope's sweep had spent whole). One
// worker more keeps every other scope's share but one, as a last attempt
// does.
//
// The holders among the waiters also have places per scope (Acquire):
// Tuning.MaxHolders, or as many as the reopening can use; Interactive work
// has Tuning.MaxHolders places of its own per scope, which background
// holders never take.
type Holders struct {
	mu    sync.Mutex
	n     map[string]int // holders per scope, every class
	ni    map[string]int // holders per scope, interactive
	w     map[string]int // waiters per scope, every kind
	total int            // waiters in all
	// the most recent scope a task entered with and when, and the most
	// recent other scope and when (so the last entry of a scope other
	// than any k is known)
	last, other     string
	lastAt, otherAt time.Time
	first           time.Time // when the first task entered (see mayWait)
	// workers is the most tasks seen inside the middleware at once: the
	// process's workers, as far as they were seen (see mayWait)
	workers int64
	// past is the scope whose waiters the rule let past the share as
	// alone ("" none); crowd is closed when a task of another scope enters
	// meanwhile (see Crowded).
	past  string
	crowd chan struct{}
	// beyond is whether the one place past the rule kept for interactive
	// work is taken (Beyond)
	beyond bool
}

// Want is what a worker asks Join for: to Keep one task inside from
// waiting (see mayWait), to Force a place whatever the count (a last
// attempt), and whether its work is Interactive, which may take the one
// place past the rule kept for it (see Holders).
type Want struct{ Keep, Force, Interactive bool }

// A Place is the waiter's place Join gave: none, one within the rule
// (Shared), or the one past it kept for interactive work (Beyond). Leave
// gives it back.
type Place uint8

// The places Join gives.
const (
	NoPlace Place = iota
	Shared
	Beyond
)

// holdShare bounds what the waiters may take of a process's workers while
// more than one scope is served: one in two.
// Without a bound, many scopes pausing briefly at once hold every worker
// and admissions stall; and one paced scope's waiters (some sleeping
// until a reserved slot, the others holding for the window after) take
// every worker, so that a scope with no quota at all waits behind the
// paced scope's backlog in the queue.
const holdShare = 2

// fairFor is how long after a task of another scope (or without one)
// entered the middleware a scope's waiters are still held to holdShare:
// MaxHold's default and one asynq tick, the longest a worker waits before
// it asks again: the workers the share leaves free take task after task of
// the queue (deferring the paced scope's) and meet the other scopes' tasks
// again well within it; short, so a process left with one scope soon
// gives its reopening every worker again (were one scope's own holders
// capped by the share, a process serving one carrier alone would fall far
// behind the carrier's quota: TestModesEndToEnd).
// Chosen with the example (go run ./example -modes gate,gate+limit; docs/measurements.md).
const fairFor = 2500 * time.Millisecond

// Enter notes that a task of scope k ("" none) entered the middleware at
// now.
func (h *Holders) Enter(k string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.first.IsZero() {
		h.first = now
	}
	if h.past != "" && k != h.past {
		h.crowded()
	}
	if k != h.last {
		h.other, h.otherAt = h.last, h.lastAt
	}
	h.last, h.lastAt = k, now
}

// Join takes a waiter's place for a worker of scope k at now, with inside
// tasks inside the middleware (this one among them), if the rule allows
// it (see Holders and Want).
func (h *Holders) Join(k string, inside int64, now time.Time, w Want) Place {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.workers = max(h.workers, inside)
	p := Shared
	if !w.Force && !h.mayWait(k, inside, now, w.Keep) {
		if !w.Interactive || h.beyond {
			return NoPlace
		}
		p, h.beyond = Beyond, true
	}
	if h.w == nil {
		h.w = make(map[string]int)
	}
	h.w[k]++
	h.total++
	return p
}

// mayWait reports whether one more worker of scope k may wait at now,
// with inside tasks inside the middleware: within half of those; beside
// another scope, within the share of the workers; or while
// every waiter is of k and k is alone, in the process's first fairFor or
// when keep asks it, only as long as one task inside does not wait. That
// one takes task after task of the queue: a process's first tasks may all
// be of k, the others' queued behind them, and with every worker waiting
// for k none would enter but at k's pace, k looking alone all along.
//
// Beside another scope the share is of the workers, the most tasks seen
// inside at once, not of the tasks inside now: while a scope is paused,
// every task of it that may not wait is deferred at once and leaves, so
// the tasks inside are the waiters and the one asking, and a share of
// them would let one worker wait. The workers that do not wait take task
// after task of the queue, whatever their number, and meet the other
// scopes' tasks. A scope seen alone is served by the rules after it.
func (h *Holders) mayWait(k string, inside int64, now time.Time, keep bool) bool {
	n := int64(h.total)
	switch {
	case n < max(inside/holdShare, 1):
		return true
	case h.total > h.w[k] || !h.alone(k, now):
		return n < h.workers/holdShare
	case (now.Sub(h.first) < fairFor || keep) && n+1 >= inside:
		return false
	}
	h.past = k
	return true
}

// crowded wakes the holders of Crowded: the scope let past the share
// is no longer alone.
func (h *Holders) crowded() {
	h.past = ""
	if h.crowd != nil {
		close(h.crowd)
		h.crowd = nil
	}
}

// Crowded returns a channel closed when a task of another scope (or
// without one) enters while one scope's waiters are past the share, the
// rule having let them as alone: its holders then ask again, and those
// past the share are deferred, leaving their workers to the other
// scope's tasks instead of holding them until their waits end.
func (h *Holders) Crowded() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.crowd == nil {
		h.crowd = make(chan struct{})
	}
	return h.crowd
}

// alone reports whether no task of a scope other than k entered within
// fairFor before now.
func (h *Holders) alone(k string, now time.Time) bool {
	at, seen := h.lastAt, h.last != k && !h.lastAt.IsZero()
	if !seen {
		at, seen = h.otherAt, !h.otherAt.IsZero()
	}
	return !seen || now.Sub(at) >= fairFor
}

// Leave gives back the place p Join gave for scope k (NoPlace: none).
func (h *Holders) Leave(k string, p Place) {
	if p == NoPlace {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if p == Beyond {
		h.beyond = false
	}
	h.total--
	if h.w[k]--; h.w[k] <= 0 {
		delete(h.w, k)
	}
	if h.total == 0 {
		h.past = ""
	}
}

// Acquire takes a holder's place for work of scope k, Interactive or
// background, if fewer than limit of its holders of that class hold. The
// worker has joined the waiters already.
func (h *Holders) Acquire(k string, interactive bool, limit int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	mine := h.n[k] - h.ni[k]
	if interactive {
		mine = h.ni[k]
	}
	if mine >= limit {
		return false
	}
	if h.n == nil {
		h.n, h.ni = make(map[string]int), make(map[string]int)
	}
	h.n[k]++
	if interactive {
		h.ni[k]++
	}
	return true
}

// Release gives back a place Acquire took.
func (h *Holders) Release(k string, interactive bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n[k]--; h.n[k] <= 0 {
		delete(h.n, k)
	}
	if interactive {
		if h.ni[k]--; h.ni[k] <= 0 {
			delete(h.ni, k)
		}
	}
}

// Held returns how many workers hold in one of scope k's places, of
// either class.
func (h *Holders) Held(k string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[k]
}

// Waiting returns how many workers wait in-process in all (the waiters
// Join counted), of every scope.
func (h *Holders) Waiting() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total
}
