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
// (fedex). Before local.Holders.Join, ups's workers waiting for their reserved
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

// TestMiddlewareFreeScopeQueuedBehindPacedStart: the free scope's tasks
// are queued behind the first tasks of a scope paced by a configured
// limit (ups: 8 per second, as many as the workers), so that the
// process has seen no other scope when ups's first tasks take its
// workers: 8 run, the next 8 sleep until the slots they reserved in the
// next window, and others hold for the window after. ups looks alone,
// but in a process's first fairFor its waiters leave one worker
// (local.Holders), which takes task after task of the queue and meets
// the free scope's before ups's backlog moves on at ups's pace. (Before,
// ups's waiters took all 8 workers, nothing else could enter, and the
// queue drained at 8 a second: fedex's tasks ran after ups's 40.)
func TestMiddlewareFreeScopeQueuedBehindPacedStart(t *testing.T) {
	t.Parallel()
	mwOnBackends(t, func(t *testing.T, e *mwEnv) {
		const workers, ahead, free = 8, 40, 10
		g := e.gate(Config{Limits: map[string][]Limit{"ups": {FixedWindow(workers, time.Second)}}})
		t.Cleanup(func() { g.Close() })
		// Queued before the server starts: ups's 40 first, then fedex's.
		for range ahead {
			e.enqueue(NewTask(mwTaskType, nil, mwUPS, asynq.MaxRetry(5)))
		}
		fedex := make([]string, free)
		for i := range fedex {
			fedex[i] = e.enqueue(NewTask(mwTaskType, nil, mwFedEx, asynq.MaxRetry(5)))
		}
		var upsDone, fedexDone atomic.Int64
		var upsAtLastFedex atomic.Int64 // ups tasks done when the last fedex task ran
		var mostWaiting atomic.Int64    // the most workers waiting in-process at once, sampled
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			for {
				if n := int64(g.holders.Waiting()); n > mostWaiting.Load() {
					mostWaiting.Store(n)
				}
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
				}
			}
		}()
		rec := e.serve(g, func(ctx context.Context, task *asynq.Task) error {
			s, _ := ScopeFromContext(ctx)
			if s == mwFedEx {
				if fedexDone.Add(1) == free {
					upsAtLastFedex.Store(upsDone.Load())
				}
				return nil
			}
			upsDone.Add(1)
			return nil
		}, mwConcurrency(workers))
		e.waitFor("every fedex task done", func() bool { return fedexDone.Load() == free })
		close(stop)
		<-sampled
		if n := mostWaiting.Load(); n >= workers {
			t.Errorf("%d of %d workers waited in-process at once: ups's waiting took every worker", n, workers)
		}
		// ups's pace lets 8 go each second: its first window, perhaps its
		// second, may be done, not the 40 queued ahead of fedex.
		if n := upsAtLastFedex.Load(); n > 2*workers {
			t.Errorf("ups had %d of %d tasks done when fedex's last ran: fedex waited on ups's pace", n, ahead)
		}
		for _, id := range fedex {
			if o := rec.outcome(id); len(o.deferrals) > 0 {
				t.Errorf("fedex task %s deferred: %+v", id, o.deferrals)
			}
		}
		t.Logf("%s: ups %d of %d done when fedex's last task ran; at most %d of %d workers waiting",
			e.b.name, upsAtLastFedex.Load(), ahead, mostWaiting.Load(), workers)
	})
}
