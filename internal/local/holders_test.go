package local

import (
	"testing"
	"time"
)

// The classes of Acquire and Release.
const background, interactive = false, true

// TestHoldersCapInAll: waiters of many scopes take at most half the
// workers a process's middleware has seen at once, whatever the number of
// scopes pausing at once; one scope's holders are capped by its own
// places only. (Before, holders were capped per scope only: with many
// scopes pausing briefly, every worker held.)
func TestHoldersCapInAll(t *testing.T) {
	var h Holders
	now := time.Unix(1000, 0)
	const inside = 8
	held := 0
	for i := range 100 {
		k := string(rune('a'+i%26)) + "x"
		h.Enter(k, now)
		if h.Join(k, inside, now, Want{}) != NoPlace {
			held++
		}
	}
	if held != inside/holdShare {
		t.Errorf("%d waiting across scopes with %d tasks inside, want %d", held, inside, inside/holdShare)
	}
	if h.Join("zz", inside, now, Want{Force: true}) == NoPlace || h.total != inside/holdShare+1 {
		t.Errorf("a last attempt did not join whatever the count: total %d", h.total)
	}
	var one Holders
	for range 10 {
		one.Acquire("k", background, 3)
	}
	if one.n["k"] != 3 {
		t.Errorf("one scope holds %d, want its cap 3", one.n["k"])
	}
	one.Release("k", background)
	if one.n["k"] != 2 {
		t.Errorf("after a release: scope %d", one.n["k"])
	}
	one.Release("k", background)
	one.Release("k", background)
	if len(one.n) != 0 || one.Held("k") != 0 {
		t.Errorf("after every release: %d scopes counted, %d held", len(one.n), one.Held("k"))
	}
	// Interactive work has places of its own, and counts as the scope's in
	// the share of all: background holders of its scope never keep it out.
	var mixed Holders
	for range 12 {
		mixed.Acquire("k", background, 12)
	}
	if !mixed.Acquire("k", interactive, 12) || mixed.ni["k"] != 1 || mixed.n["k"] != 13 {
		t.Errorf("interactive with 12 background holders of its scope: ni %d n %d, want a place", mixed.ni["k"], mixed.n["k"])
	}
	if mixed.Acquire("k", background, 12) {
		t.Error("a 13th background holder took a place: interactive places are not background's")
	}
	mixed.Release("k", interactive)
	if mixed.ni["k"] != 0 || mixed.n["k"] != 12 {
		t.Errorf("after the interactive release: ni %d n %d", mixed.ni["k"], mixed.n["k"])
	}
}

// TestHoldersFairShare: one scope's waiters of every kind may take every
// task inside the middleware only while no task of another scope entered
// within fairFor, and every task but one in the process's first fairFor;
// then they keep to one in holdShare, and fairFor after the other scope's
// last task the scope alone has every worker again.
func TestHoldersFairShare(t *testing.T) {
	now := time.Unix(1000, 0)
	start := now.Add(-fairFor) // the processes below took their first task then
	const inside = 20
	fill := func(h *Holders, at time.Time) int {
		n := 0
		for n < 2*inside && h.Join("acme", inside, at, Want{}) != NoPlace {
			n++
		}
		return n
	}
	var alone Holders
	alone.Enter("acme", start)
	alone.Enter("acme", now)
	if n := fill(&alone, now); n != 2*inside {
		t.Errorf("one scope alone: %d waiters of %d tasks inside, want every one", n, inside)
	}
	// A process's first tasks, all of one scope: one task inside is left
	// to take the next of the queue, where another scope's may be.
	var first Holders
	first.Enter("acme", now)
	if n := fill(&first, now.Add(fairFor-time.Millisecond)); n != inside-1 {
		t.Errorf("in a process's first fairFor, one scope seen: %d waiters of %d tasks inside, want every one but one", n, inside)
	}
	if first.Join("acme", inside, now, Want{Force: true}) == NoPlace {
		t.Error("a last attempt did not join in a process's first fairFor")
	}
	if n := fill(&first, now.Add(fairFor)); n != 2*inside {
		t.Errorf("fairFor after the process's first task, one scope seen: %d more waiters, want every one", n)
	}
	// Waiters that keep one worker free (interactive work expected behind
	// them): one task inside is left, however long the scope has been
	// alone; a waiter that does not ask to keep one (the interactive task)
	// takes it.
	var keep Holders
	keep.Enter("acme", start)
	keep.Enter("acme", now)
	n := 0
	for n < 2*inside && keep.Join("acme", inside, now, Want{Keep: true}) != NoPlace {
		n++
	}
	if n != inside-1 {
		t.Errorf("one scope alone, waiters keeping one free: %d waiters of %d tasks inside, want every one but one", n, inside)
	}
	if keep.Join("acme", inside, now, Want{}) == NoPlace {
		t.Error("the interactive task did not take the worker left for it")
	}
	var two Holders // with 2 tasks inside in the first fairFor, 1 waits
	two.Enter("acme", now)
	if two.Join("acme", 2, now, Want{}) == NoPlace || two.Join("acme", 2, now, Want{}) != NoPlace {
		t.Errorf("with 2 tasks inside in a process's first fairFor: %d waiters, want 1", two.Waiting())
	}
	var shared Holders
	shared.Enter("acme", start)
	shared.Enter("swift", now)
	shared.Enter("acme", now.Add(time.Second))
	at := now.Add(2 * time.Second)
	if n := fill(&shared, at); n != inside/holdShare {
		t.Errorf("beside swift: acme has %d waiters of %d tasks inside, want %d", n, inside, inside/holdShare)
	}
	// swift is still the other scope however many acme tasks enter since.
	for range 50 {
		shared.Enter("acme", at)
	}
	if shared.Join("acme", inside, at, Want{}) != NoPlace {
		t.Error("acme joined past its share after more acme tasks entered")
	}
	if shared.Join("swift", inside, at, Want{Force: true}) == NoPlace {
		t.Error("a last attempt did not join")
	}
	shared.Leave("swift", Shared)
	later := now.Add(fairFor)
	if shared.Join("acme", inside, later, Want{}) == NoPlace {
		t.Errorf("fairFor after swift's last task acme is alone, and may wait")
	}
	// A task without a scope counts as another scope's.
	var none Holders
	none.Enter("acme", start)
	none.Enter("", now)
	none.Enter("acme", now)
	if n := fill(&none, now); n != inside/holdShare {
		t.Errorf("beside a task without a scope: %d waiters, want %d", n, inside/holdShare)
	}
}

// TestHoldersShareOfWorkers: the share is of the workers seen inside at
// once, not of the tasks inside now. While a scope is paused beside
// another, its tasks that may not wait are deferred and leave at once, so
// the tasks inside are the waiters and the one asking: a share of those
// lets one worker wait, and the reopening finds no worker to send.
func TestHoldersShareOfWorkers(t *testing.T) {
	now := time.Unix(1000, 0)
	var h Holders
	h.Enter("acme", now.Add(-fairFor))
	h.Enter("swift", now)
	h.Enter("acme", now)
	if h.Join("acme", 20, now, Want{}) != NoPlace { // 20 workers busy at once: one waits
		h.Leave("acme", Shared)
	} else {
		t.Fatal("the first waiter of 20 workers did not join")
	}
	n := 0
	for n < 20 && h.Join("acme", int64(n+1), now, Want{}) != NoPlace { // each deferral leaves
		n++
	}
	if n != 20/holdShare {
		t.Errorf("with 20 workers seen and only the waiters inside: %d waiters, want %d", n, 20/holdShare)
	}
}

// TestHoldersInteractiveBeyond: with the waiters at the share, one worker
// of interactive work, in the whole process, may wait past it; another
// may not until that one leaves, and background work never does.
func TestHoldersInteractiveBeyond(t *testing.T) {
	now := time.Unix(1000, 0)
	var h Holders
	h.Enter("acme", now.Add(-fairFor))
	h.Enter("swift", now)
	const inside = 8
	for h.Join("acme", inside, now, Want{}) != NoPlace {
	}
	if h.Join("acme", inside, now, Want{Interactive: true}) != Beyond {
		t.Fatal("interactive work at the share took no place past it")
	}
	if p := h.Join("swift", inside, now, Want{Interactive: true}); p != NoPlace {
		t.Fatalf("a second interactive worker past the share took %v", p)
	}
	if h.total != inside/holdShare+1 {
		t.Errorf("%d waiting, want the share %d and one", h.total, inside/holdShare)
	}
	h.Leave("acme", Beyond)
	if h.Join("swift", inside, now, Want{Interactive: true}) != Beyond {
		t.Error("the place past the share, given back, was not taken again")
	}
	if h.Join("swift", inside, now, Want{}) != NoPlace {
		t.Error("background work waited past the share")
	}
}

// TestInFlight: the count of a scope rises with each entry, falls with
// each leave, is apart from other scopes', and is gone at zero.
func TestInFlight(t *testing.T) {
	var f InFlight
	if n := f.Enter("a", 1); n != 1 {
		t.Fatalf("first entry: %d, want 1", n)
	}
	if n := f.Enter("a", 2); n != 3 {
		t.Fatalf("an entry of 2 more: %d, want 3", n)
	}
	if n := f.Enter("b", 1); n != 1 {
		t.Fatalf("another scope: %d, want 1", n)
	}
	f.Leave("a", 3)
	if _, ok := f.m["a"]; ok {
		t.Fatalf("a scope left at zero keeps its entry: %v", f.m)
	}
	if n := f.Enter("a", 1); n != 1 {
		t.Fatalf("after leaving: %d, want 1", n)
	}
}

// TestHoldersCrowded: once a scope's waiters are past the share as alone,
// a task of another scope (or without one) entering wakes its holders
// (Crowded), once; within the share, nothing wakes.
func TestHoldersCrowded(t *testing.T) {
	now := time.Unix(1000, 0)
	const inside = 8
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	var h Holders
	h.Enter("acme", now.Add(-fairFor))
	h.Enter("acme", now)
	for range inside / holdShare {
		h.Join("acme", inside, now, Want{})
	}
	within := h.Crowded()
	h.Enter("acme", now)
	if closed(within) {
		t.Error("woken by a task of the scope itself")
	}
	for range inside / holdShare {
		if h.Join("acme", inside, now, Want{}) == NoPlace {
			t.Fatal("acme alone could not wait past the share")
		}
	}
	past := h.Crowded()
	if past != within {
		t.Error("a new channel before anything was woken")
	}
	h.Enter("", now.Add(time.Millisecond))
	if !closed(past) {
		t.Error("a task without a scope entered beside acme past the share: its holders not woken")
	}
	again := h.Crowded()
	h.Enter("swift", now.Add(time.Millisecond))
	if closed(again) {
		t.Error("woken twice for one time past the share")
	}
	if h.Join("acme", inside, now.Add(time.Millisecond), Want{}) != NoPlace {
		t.Error("acme joined past the share beside another scope")
	}

	var shared Holders // within the share: no wake
	shared.Enter("acme", now)
	shared.Join("acme", inside, now, Want{})
	ch := shared.Crowded()
	shared.Enter("swift", now)
	if closed(ch) {
		t.Error("woken while the waiters keep to the share")
	}
}
