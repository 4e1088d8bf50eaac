package quotagate

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/feed"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/internal/schema"
)

// TestSlotMigrationMissesNoPause: on the replicated Cluster, the slot of
// one group of the feed moves to another master, its keys one at a time,
// while a gate pauses scopes of that group every 10 ms; then the slot of a
// paused scope moves too. Another gate, whose feed was live before and
// which would admit those scopes without a round trip, knows every pause
// the first gate recorded (none silently missed) and defers their tasks,
// and the scope whose slot moved keeps its pause.
func TestSlotMigrationMissesNoPause(t *testing.T) {
	c := redistest.StartReplicatedCluster(t)
	prefix := c.Prefix(t)
	ctx := context.Background()
	writer := New(c.Client(t), Config{Prefix: prefix})
	t.Cleanup(func() { writer.Close() })
	reader, trips := cachedGate(t, c.Client(t), prefix, time.Now)
	cacheOpen(t, reader, trips, Scope{Provider: "warm"})

	const group = 3
	var scopes []Scope
	for i := 0; len(scopes) < 40; i++ {
		s := Scope{Provider: "ups", Account: fmt.Sprint("acct-", i)}
		if schema.FeedGroup(scopeKeys(prefix, s).Pause, feed.Groups(c.Client(t))) == group {
			scopes = append(scopes, s)
		}
	}
	log, _, _ := schema.FeedKeys(prefix, group)
	slot, err := c.Client(t).ClusterKeySlot(ctx, log).Result()
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var paused []Scope
	started := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i, s := range scopes {
			if i == 5 {
				close(started)
			}
			if _, err := writer.Pause(ctx, s, time.Minute); err == nil {
				mu.Lock()
				paused = append(paused, s)
				mu.Unlock()
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	<-started
	from, to := c.MigrateSlot(t, int(slot), 50*time.Millisecond)
	t.Logf("the feed group's slot %d moved from %s to %s", slot, from, to)
	<-done
	if len(paused) < len(scopes)/2 {
		t.Fatalf("only %d of %d pauses recorded during the move", len(paused), len(scopes))
	}

	moved := paused[0]
	scopeSlot, err := c.Client(t).ClusterKeySlot(ctx, scopeKeys(prefix, moved).Pause).Result()
	if err != nil {
		t.Fatal(err)
	}
	c.MigrateSlot(t, int(scopeSlot), 0)

	for _, s := range paused {
		k := scopeKeys(prefix, s).Pause
		eventually(t, fmt.Sprintf("the reader knows the pause of %v", s), func() bool { return !reader.admitsUncached(k) })
		if !deferredPaused(reader, s) {
			t.Errorf("the reader admits a task of %v, paused during the move", s)
		}
	}
	if st, err := writer.State(ctx, moved); err != nil || st.Remaining <= 0 {
		t.Errorf("the scope whose slot moved: %+v, %v; want still paused", st, err)
	}
}
