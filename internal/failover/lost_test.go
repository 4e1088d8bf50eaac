package failover

import (
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/model"
)

// TestLostFrom: the step table of LostFrom, for a pause remembered until
// 2,000,000 ms (Redis TIME), seen at 1,990,000 ms, ending 10 s after recv
// by this process's clock; slack is StoreTimeout's default. lost is the
// decision when the pause may be of another master's clock (remembered
// before an epoch), sameClock within one epoch, where only the deadlines
// count.
func TestLostFrom(t *testing.T) {
	recv := time.Unix(1_000, 0)
	e := Remembered{UntilMs: 2_000_000, SeenMs: 1_990_000, End: recv.Add(10 * time.Second)}
	const ms = time.Millisecond
	slack := 250 * ms
	for _, c := range []struct {
		name            string
		code            int64         // the reply's code
		nowMs           int64         // the reply's Redis TIME
		wait            time.Duration // how long the reply holds the scope
		late            time.Duration // the reply's arrival after recv, by this process's clock
		lost, sameClock bool
	}{
		{"the same deadline, same clock", model.Paused, 1_990_000, 10_000 * ms, 0, false, false},
		{"a later deadline", model.Paused, 1_990_000, 15_000 * ms, 0, false, false},
		{"absent", model.Admitted, 1_990_000, 0, 0, true, true},
		{"earlier", model.Paused, 1_990_000, 9_000 * ms, 0, true, true},
		{"the same deadline on a clock 100 ms ahead (within slack)", model.Paused, 1_990_100, 9_900 * ms, 0, false, false},
		{"the same deadline on a clock 3 s ahead", model.Paused, 1_993_000, 7_000 * ms, 0, true, false},
		{"the same deadline on a clock 3 s behind", model.Paused, 1_987_000, 13_000 * ms, 0, false, false},
		{"absent, on a clock 11 s ahead (past the deadline)", model.Admitted, 2_001_000, 0, 0, true, false},
		{"the same deadline, the reply 200 ms in transit", model.Paused, 1_990_000, 10_000 * ms, 200 * ms, false, false},
		{"a limit's slot, not a pause (absent)", model.Limited, 1_990_000, 10_000 * ms, 0, true, true},
	} {
		a := Reply(c.code, c.nowMs*1000, c.wait, recv.Add(c.late))
		if got := e.LostFrom(a, slack, true); got != c.lost {
			t.Errorf("%s: LostFrom = %v, want %v", c.name, got, c.lost)
		}
		if got := e.LostFrom(a, slack, false); got != c.sameClock {
			t.Errorf("%s, same clock: LostFrom = %v, want %v", c.name, got, c.sameClock)
		}
	}
}
