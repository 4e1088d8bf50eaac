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

// deferralOf is the Deferral of the task that answer a holds back, to wake
// after wait.
func deferralOf(a decide.Answer, wait time.Duration) Deferral {
	return Deferral{Delay: wait, RetryAt: a.Now.Add(wait), Reason: publicReason(a.Reason), Deadline: a.Until, Operator: a.ByOperator}
}

// admitRequest is the store's request for an admission of cost units
// under the configured limits ls, reserving a slot up to hold ahead.
func admitRequest(ls []Limit, cost int, hold time.Duration) store.AdmitRequest {
	return store.AdmitRequest{Limits: specs(ls), Cost: cost, Hold: hold, Answer: decide.AnswerTimeout(hold)}
}
