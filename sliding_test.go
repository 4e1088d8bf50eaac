package quotagate

import (
	"context"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/model"
)

// TestSlidingState: a sliding log spent whole defers the next task until
// its oldest entry leaves, State shows how long until the log is empty,
// and Resume deletes it.
func TestSlidingState(t *testing.T) {
	c, rdb := newMini(t)
	ctx := context.Background()
	s := Scope{Provider: "acme", Account: "a"}
	g := newWith(rdb, Config{Prefix: "qgtest", Limits: map[string][]Limit{"acme": {SlidingWindow(3, 10*time.Second)}}},
		hooks{now: func() time.Time { return c.Now }})
	defer g.Close()
	for i := range 3 {
		if err := g.admit(ctx, s, 1, false); err != nil {
			t.Fatalf("admission %d: %v", i, err)
		}
		c.Advance(time.Second)
	}
	if err := g.admit(ctx, s, 1, false); err == nil {
		t.Fatal("a fourth admitted within the window")
	}
	st, err := g.State(ctx, s)
	want := 10*time.Second + model.SlidingSettle*time.Microsecond - time.Second // the last entry, a second old
	if err != nil || st.LimitBacklog != want {
		t.Fatalf("State = %+v, %v; want a limit backlog of %v", st, err, want)
	}
	k := scopeKeys("qgtest", s)
	if !c.MR.Exists(limitKey(k, 0, SlidingWindow(3, 10*time.Second))) {
		t.Fatal("no log in Redis")
	}
	if err := g.Resume(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := g.admit(ctx, s, 1, false); err != nil {
		t.Errorf("after Resume: %v, want admitted at once", err)
	}
}
