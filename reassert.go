package quotagate

// The gate's glue to its memory of the pauses in force (internal/failover,
// whose package doc says what a process remembers, when it re-asserts and
// why): the admission answers it notes and rechecks, and the pause it
// knows as an answer while the store fails.

import (
	"context"
	"time"

	"github.com/quotagate/quotagate/internal/decide"
	"github.com/quotagate/quotagate/internal/failover"
	"github.com/quotagate/quotagate/internal/model"
	"github.com/quotagate/quotagate/internal/schema"
)

// recheck applies the remembered pause of k to the admission answer a,
// received at recv: when a says the pause is absent or earlier, it is
// re-asserted and again is set (ask again: the scope is paused). When the
// re-assertion fails, known is the remembered pause as an answer (defer).
func (g *Gate) recheck(ctx context.Context, k schema.Keys, a decide.Answer, recv time.Time) (again bool, known *decide.Answer) {
	again, err := g.mem.Recheck(ctx, k.Pause, failover.Reply(a.Code, a.NowMicros, a.Wait, recv))
	if err != nil {
		kp, _ := g.knownPause(k, g.now())
		return false, &kp
	}
	return again, nil
}

// knownPause returns, as an admission answer at now, the pause of k this
// gate remembers in force, if any: what the store would answer had it not
// lost or failed it.
func (g *Gate) knownPause(k schema.Keys, now time.Time) (decide.Answer, bool) {
	e, ok := g.mem.Get(k.Pause, now)
	if !ok {
		return decide.Answer{}, false
	}
	wait := e.End.Sub(now)
	return decide.Answer{Code: model.Paused, Reason: model.ReasonPause, Wait: wait, Until: now.Add(wait), Now: now, ByOperator: e.Operator}, true
}

// noteAnswer remembers the pause an admission answer a (received now)
// says is in force.
func (g *Gate) noteAnswer(k schema.Keys, a decide.Answer) {
	if a.Code == model.Paused && a.Reason == model.ReasonPause && a.UntilDeadline > 0 {
		g.mem.Note(k.Pause, a.UntilDeadline, a.NowMicros/1000, g.now(), a.ByOperator)
	}
}

// notePause remembers the pause of k that the store says is in force
// until until, remaining rem by Redis TIME, as the answer arrives.
func (g *Gate) notePause(k schema.Keys, until time.Time, rem time.Duration, operator bool) {
	u := until.UnixMilli()
	g.mem.Note(k.Pause, u, u-rem.Milliseconds(), g.now(), operator)
}
