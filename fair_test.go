package quotagate

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
)

// TestMiddlewareOnePacedScopeDoesNotStarveAnother: the reference article's
// "do not let one provider freeze every integration", in one process. A
// scope paced by a configured limit (ups: 2 per second) with a deep
// backlog shares 8 workers and one queue with a scope that has no limit
// (fedex). Before holders.join, ups's workers waiting for their reserved
// slots and for the next windows took every worker, and the queue drained
// at ups's pace: fedex's last task ran after nearly all of ups's backlog.
// Now every fedex task completes while most of ups's backlog still waits.
func TestMiddlewareOnePacedScopeDoesNotStarveAnother(t *testing.T) {
	t.Parallel()
	mwOnBackends(t, func(t *testing.T, e *mwEnv) {
		g := e.gate(Config{Limits: map[string][]Limit{"ups": {FixedWindow(2, time.Second)}}})
		t.Cleanup(func() { g.Close() })
		const paced, free = 60, 10
		var upsDone, fedexDone atomic.Int64
		var upsAtLastFedex atomic.Int64 // ups tasks done when the last fedex task ran
		e.serve(g, func(ctx context.Context, task *asynq.Task) error {
			s, _ := ScopeFromContext(ctx)
			if s == mwFedEx {
				if fedexDone.Add(1) == free {
					upsAtLastFedex.Store(upsDone.Load())
				}
				return nil
			}
			upsDone.Add(1)
			return nil
		}, mwConcurrency(8))
		// One queue, the free scope's tasks spread through the paced one's.
		for i := range paced + free {
			s := mwUPS
			if i%7 == 3 {
				s = mwFedEx
			}
			e.enqueue(NewTask(mwTaskType, nil, s, asynq.MaxRetry(5)))
		}
		e.waitFor("every fedex task done", func() bool { return fedexDone.Load() == free })
		if n := upsAtLastFedex.Load(); n > paced/2 {
			t.Errorf("ups had %d of %d tasks done when fedex's last ran: fedex waited on ups's pace", n, paced)
		}
		t.Logf("%s: ups %d of %d done when fedex's last task ran", e.b.name, upsAtLastFedex.Load(), paced)
	})
}

// TestHoldersCapInAll: waiters of many scopes take at most half the tasks
// inside a process's middleware, whatever the number of scopes pausing at
// once; one scope's holders are capped by its own places only. (Before,
// holders were capped per scope only: with many scopes pausing briefly,
// every worker held.)
func TestHoldersCapInAll(t *testing.T) {
	var h holders
	now := time.Unix(1000, 0)
	const inside = 8
	held := 0
	for i := range 100 {
		k := string(rune('a'+i%26)) + "x"
		h.enter(k, now)
		if h.join(k, inside, now, false) {
			held++
		}
	}
	if held != inside/holdShare {
		t.Errorf("%d waiting across scopes with %d tasks inside, want %d", held, inside, inside/holdShare)
	}
	if !h.join("zz", inside, now, true) || h.total != inside/holdShare+1 {
		t.Errorf("a last attempt did not join whatever the count: total %d", h.total)
	}
	var one holders
	for range 10 {
		one.acquire("k", Background, 3)
	}
	if one.n["k"] != 3 {
		t.Errorf("one scope holds %d, want its cap 3", one.n["k"])
	}
	one.release("k", Background)
	if one.n["k"] != 2 {
		t.Errorf("after a release: scope %d", one.n["k"])
	}
	// Interactive work has places of its own, and counts as the scope's in
	// the share of all: background holders of its scope never keep it out.
	var mixed holders
	for range 12 {
		mixed.acquire("k", Background, 12)
	}
	if !mixed.acquire("k", Interactive, 12) || mixed.ni["k"] != 1 || mixed.n["k"] != 13 {
		t.Errorf("interactive with 12 background holders of its scope: ni %d n %d, want a place", mixed.ni["k"], mixed.n["k"])
	}
	if mixed.acquire("k", Background, 12) {
		t.Error("a 13th background holder took a place: interactive places are not background's")
	}
	mixed.release("k", Interactive)
	if mixed.ni["k"] != 0 || mixed.n["k"] != 12 {
		t.Errorf("after the interactive release: ni %d n %d", mixed.ni["k"], mixed.n["k"])
	}
}

// TestHoldersFairShare: one scope's waiters of every kind may take every
// task inside the middleware only while no task of another scope entered
// within fairFor; then they keep to one in holdShare, and fairFor after
// the other scope's last task the scope alone has every worker again.
func TestHoldersFairShare(t *testing.T) {
	now := time.Unix(1000, 0)
	const inside = 20
	fill := func(h *holders, at time.Time) int {
		n := 0
		for n < 2*inside && h.join("acme", inside, at, false) {
			n++
		}
		return n
	}
	var alone holders
	alone.enter("acme", now)
	if n := fill(&alone, now); n != 2*inside {
		t.Errorf("one scope alone: %d waiters of %d tasks inside, want every one", n, inside)
	}
	var shared holders
	shared.enter("swift", now)
	shared.enter("acme", now.Add(time.Second))
	at := now.Add(2 * time.Second)
	if n := fill(&shared, at); n != inside/holdShare {
		t.Errorf("beside swift: acme has %d waiters of %d tasks inside, want %d", n, inside, inside/holdShare)
	}
	// swift is still the other scope however many acme tasks enter since.
	for range 50 {
		shared.enter("acme", at)
	}
	if shared.join("acme", inside, at, false) {
		t.Error("acme joined past its share after more acme tasks entered")
	}
	if !shared.join("swift", inside, at, true) {
		t.Error("a last attempt did not join")
	}
	shared.leave("swift")
	later := now.Add(fairFor)
	if !shared.join("acme", inside, later, false) {
		t.Errorf("fairFor after swift's last task acme is alone, and may wait")
	}
	// A task without a scope counts as another scope's.
	var none holders
	none.enter("", now)
	none.enter("acme", now)
	if n := fill(&none, now); n != inside/holdShare {
		t.Errorf("beside a task without a scope: %d waiters, want %d", n, inside/holdShare)
	}
}
