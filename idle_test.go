package quotagate

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/feed"
	"github.com/quotagate/quotagate/internal/redistest"
)

// TestIdleGatesFeedRecovered (real Redis): idle gates, each on a client
// of its own, remember every pause another gate announces; when every
// gate's feed fails and catches up on the same master (CLIENT PAUSE past
// the polls' timeout: a recovery that lost nothing), no idle gate sends a
// script, and each reads the master's identity once per run: the cost of
// a recovery does not grow with the pauses remembered. The commands are
// counted by a hook on the idle gates' clients, between the pause and the
// end of every gate's run, no timing involved.
func TestIdleGatesFeedRecovered(t *testing.T) {
	const (
		idle       = 20
		remembered = 150
	)
	ctx := context.Background()
	srv := redistest.StartPrivate(t)
	prefix := srv.Prefix(t)
	sent := redistest.NewCommands()
	sent.Name = feed.CommandName
	gates := make([]*Gate, idle)
	for i := range gates {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
		rdb.AddHook(sent)
		t.Cleanup(func() { rdb.Close() })
		gates[i] = New(rdb, Config{Prefix: prefix})
		t.Cleanup(func() { gates[i].Close() })
		if err := gates[i].admit(ctx, Scope{Provider: "warm", Account: strconv.Itoa(i)}, 1, false); err != nil {
			t.Fatal(err) // the first admission starts the feed
		}
	}
	for _, g := range gates {
		eventuallyWithin(t, foWait, "the idle gate's feed is live", func() bool { return g.open.Live() })
	}
	writer := New(srv.Client(t), Config{Prefix: prefix})
	defer writer.Close()
	keys := make([]string, remembered)
	for i := range keys {
		s := Scope{Provider: "busy", Account: strconv.Itoa(i)}
		if _, err := writer.Pause(ctx, s, 10*time.Minute); err != nil {
			t.Fatal(err)
		}
		keys[i] = scopeKeys(prefix, s).Pause
	}
	for _, g := range gates {
		eventuallyWithin(t, foWait, "the idle gate remembers every pause", func() bool {
			for _, k := range keys {
				if _, ok := g.mem.Get(k, time.Now()); !ok {
					return false
				}
			}
			return true
		})
	}

	// recover fails every feed and returns the scripts and other commands
	// the idle gates sent until each had ended a run after it caught up,
	// and how many runs ended: PINGs, handshakes and the feed's own polls
	// and snapshots aside.
	recover := func() (scripts, others, runs int64) {
		t.Helper()
		before := make([]int64, idle)
		for i, g := range gates {
			before[i] = g.mem.Runs()
		}
		feedAndPings := func() int64 { return sent.Of("ping", "feed") }
		s0, o0 := sent.Of("evalsha", "eval"), sent.Total()-feedAndPings()
		if err := srv.Client(t).Do(ctx, "CLIENT", "PAUSE", (3 * time.Second / 2).Milliseconds()).Err(); err != nil {
			t.Fatal(err)
		}
		for i, g := range gates {
			eventuallyWithin(t, foWait, "the idle gate ends a run after its feed caught up", func() bool {
				return g.mem.Runs() > before[i]
			})
		}
		for i, g := range gates {
			runs += g.mem.Runs() - before[i]
		}
		scripts = sent.Of("evalsha", "eval") - s0
		return scripts, sent.Total() - feedAndPings() - o0 - scripts, runs
	}
	// The first time, the pauses a gate remembered before it knew the
	// master's identity are re-asserted, once (a few, or none).
	recover()
	scripts, others, runs := recover()
	t.Logf("%d idle gates, %d pauses remembered, feeds failed: %d scripts, %d other commands, %d runs", idle, remembered, scripts, others, runs)
	if scripts != 0 {
		t.Errorf("%d idle gates remembering %d pauses sent %d scripts after their feeds caught up on the same master, want none", idle, remembered, scripts)
	}
	if others > 2*runs+2*idle { // each run's identity read; and a run may be under way
		t.Errorf("%d idle gates sent %d commands besides PINGs over %d runs, want at most two per run (the identity read)", idle, others, runs)
	}
}
