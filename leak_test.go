package quotagate

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// TestUnclosedGateLeavesNoWatcher: a gate whose client is closed without
// Gate.Close (a common shutdown order) stops following announcements: its
// subscription's goroutine ends. (TestMain checks every test for leaks at
// the end; this one names the case.) Not parallel: it compares the
// process's goroutines before and after.
func TestUnclosedGateLeavesNoWatcher(t *testing.T) {
	before := goleak.IgnoreCurrent()
	mr, err := miniredis.Run()
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	g := New(rdb, Config{Tuning: Tuning{OpenCache: time.Hour}})
	s := Scope{Provider: "ups"}
	eventually(t, "the gate's subscription is live", func() bool {
		if err := g.admit(context.Background(), s, 1, false); err != nil {
			t.Fatal(err)
		}
		return g.admitsUncached(scopeKeys(g.cfg.Prefix, s).Pause)
	})
	rdb.Close()
	mr.Close()
	goleak.VerifyNone(t, before)
}
