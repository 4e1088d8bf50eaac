package failover

import (
	"time"

	"github.com/quotagate/quotagate/internal/model"
)

// Answer is what an admission's reply says of its scope, as LostFrom
// reads it: the reply's Redis TIME and the instant until which it holds
// the scope (Unix µs; HeldUs = NowUs: open now), and when the reply
// arrived by this process's clock.
type Answer struct {
	NowUs, HeldUs int64
	Recv          time.Time
}

// Reply is the Answer of an admission reply of code (model.Admitted,
// Paused or Limited) at Redis TIME nowUs, waiting wait, received at recv:
// only a paused reply holds the scope until a deadline (a limited one
// waits for a slot of a limit, which no pause's loss explains away).
func Reply(code, nowUs int64, wait time.Duration, recv time.Time) Answer {
	a := Answer{NowUs: nowUs, HeldUs: nowUs, Recv: recv}
	if code == model.Paused {
		a.HeldUs += wait.Microseconds()
	}
	return a
}

// LostFrom reports whether the answer a says that the remembered pause e
// is absent or earlier: the scope is held until before e's deadline (on
// the clock that set it), or, by this process's clock, ends more than
// slack before e does (the new master's clock runs ahead of the old
// one's). Without a failover neither holds: the deadline in force is at
// least e's, and an answer's end by this clock is early by at most its
// transit, below slack (StoreTimeout, which bounds every answer's round
// trip).
//
// The relative test applies only with otherClock set: the pause was
// remembered before the store last changed (an epoch, see Memory).
func (e Remembered) LostFrom(a Answer, slack time.Duration, otherClock bool) bool {
	if e.UntilMs*1000 > a.HeldUs {
		return true
	}
	if !otherClock {
		return false
	}
	ends := a.Recv.Add(time.Duration(a.HeldUs-a.NowUs) * time.Microsecond)
	return e.End.Sub(ends) > slack
}
