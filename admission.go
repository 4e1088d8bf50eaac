package quotagate

import (
	"time"

	"github.com/quotagate/quotagate/internal/decide"
	"github.com/quotagate/quotagate/internal/store"
)

// The admission. The Middleware and the Transport ask Redis one question
// per task (model's admission script, through internal/store) and hand
// its answer to internal/decide, which says what to do without I/O or a
// clock: run now (perhaps after a slot reserved a moment ahead), hold the
// worker in-process and ask again, or defer the task through asynq. The
// loop that calls Redis and sleeps is Gate.admission (middleware.go);
// what it keeps between round trips (the open cache, the holders' places,
// the slot wakers) is internal/local's.

// deferralOf is the Deferral of the task that answer a holds back, as
// verdict v defers it: after v.Retry, or at the start of the second it
// ends in (v.Early), on the worker's clock, which asynq's retry times
// follow.
func (g *Gate) deferralOf(a decide.Answer, v decide.Verdict) Deferral {
	d := Deferral{Delay: v.Retry, Reason: publicReason(a.Reason), Deadline: a.Until, Operator: a.ByOperator}
	if v.Early {
		now := g.now()
		d.Delay = decide.WakeEarly(now, v.Retry)
		if d.Delay < v.Retry {
			d.wake = now.Add(d.Delay)
		}
	}
	d.RetryAt = a.Now.Add(d.Delay)
	return d
}

// admitRequest is the store's request for an admission of cost units
// under the configured limits ls, reserving a slot up to hold ahead.
func admitRequest(ls []Limit, cost int, hold time.Duration) store.AdmitRequest {
	return store.AdmitRequest{Limits: specs(ls), Cost: cost, Hold: hold, Answer: decide.AnswerTimeout(hold)}
}
