package decide

import (
	"time"

	"github.com/quotagate/quotagate/internal/model"
)

// Answer is the admission script's decision (model.Decision), with Redis
// TIME, as the admission loop acts on it (AnswerOf).
type Answer struct {
	Code       int64         // model.Admitted, model.Paused or model.Limited
	Reason     model.Reason  // why not admitted at once
	Wait       time.Duration // how long until the task may run, or ask again
	Until      time.Time     // the deadline in force (paused), zero otherwise
	Now        time.Time     // Redis TIME of the decision
	Reopen     int64         // requests the scope can use when it reopens, 0 unknown
	Cacheable  bool          // only a pause can stop the scope (see local.OpenCache)
	Limited    bool          // limits, configured or learned, apply
	Probe      bool          // a probe: its response's budget is awaited
	Opens      int64         // a learned window's probe: its instant, to answer (0 not)
	Seq        int64         // sequence number among the admissions that spent the budget (0 unknown)
	Spread     bool          // the line spreads deferred tasks (a GCRA limit): wake at the slot
	Unreserved bool          // limited, the instant not reserved: hold until it, ask again (see Decide)
	ByOperator bool          // the pause was set by Gate.Pause
	Leased     bool          // it took a lease on the learned concurrency limit: release it
	Level      int64         // its level (model.Decision.Level): a refusal of it tells it
	Mark       int64         // its mark (model.Decision.Mark): a refusal of it tells it
	Slots      bool          // paused, it reopens into a learned concurrency limit's slots (model.Decision.Slots)

	// The reply's instants as the model has them (Unix µs, the deadline in
	// ms), for the failover memory and the differential test.
	NowMicros     int64
	UntilDeadline int64
}

// AnswerOf is the decision d of the admission script, made at now (Unix µs
// of Redis TIME), as the admission loop acts on it.
func AnswerOf(d model.Decision, now int64) Answer {
	r := Answer{Code: d.Code, Reason: d.Reason, Wait: time.Duration(d.Wait) * time.Microsecond,
		Now: time.UnixMicro(now), Reopen: d.Reopen, Cacheable: d.Cache, Limited: d.Limited,
		Probe: d.Probe, Opens: d.Opens, Seq: d.Seq, ByOperator: d.ByOp, Spread: d.Spread, Unreserved: d.Unreserved,
		Leased: d.Leased, Level: d.Level, Mark: d.Mark, Slots: d.Slots, NowMicros: now, UntilDeadline: d.Until}
	if d.Until != 0 {
		r.Until = time.UnixMilli(d.Until)
	}
	return r
}

// AsynqTick is the granularity of asynq's retry times: whole seconds.
const AsynqTick = time.Second

// AnswerTimeout is how long the peers of a learned window's probe wait for
// its answer: as long as a worker may hold (MaxHold and one asynq tick); a
// task slower than that to answer leaves the window open to the others.
func AnswerTimeout(hold time.Duration) time.Duration { return hold + AsynqTick }
