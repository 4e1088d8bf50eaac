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
