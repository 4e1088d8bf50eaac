package failover

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/internal/schema"
	"github.com/quotagate/quotagate/internal/store"
)

// TestReassertOnlyWhatANewMasterLost (real Redis): a recovery on the
// master that stayed (a timeout, a subscription made again) re-asserts
// nothing, however many pauses are remembered: it reads the master's
// identity, one call. A master that lost its data (restarted without
// persistence: a new run_id) has every remembered pause re-asserted,
// once; the next recovery again re-asserts nothing.
func TestReassertOnlyWhatANewMasterLost(t *testing.T) {
	const remembered = 200
	ctx := context.Background()
	srv := redistest.StartPrivate(t)
	rdb := srv.Client(t)
	sent := redistest.NewCommands()
	rdb.AddHook(sent)
	st := store.New(store.Config{Client: rdb, Prefix: "qg", Timeout: 2 * time.Second, MaxPause: 12 * time.Hour})
	m := New(Config{Store: st, Slack: 250 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(m.Close)

	// The master's identity, read before the pauses are remembered (as
	// a gate's first probe does).
	ms, err := st.Masters(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := st.Identity(ctx, ms[0])
	if err != nil || id == "" {
		t.Fatalf("Identity = %q, %v", id, err)
	}
	m.learn("", id)
	recorded := map[string]int64{}
	for i := range remembered {
		k := schema.ScopeKeys("qg", "ups", strconv.Itoa(i))
		rec, err := st.Pause(ctx, k, time.Minute, store.Refusal{Operator: true})
		until, rem := rec.Until, rec.Remaining
		if err != nil {
			t.Fatal(err)
		}
		u := until.UnixMilli()
		m.Note(k.Pause, u, u-rem.Milliseconds(), time.Now(), true)
		recorded[k.Pause] = u
	}
	recovery := func(what string) (scripts, infos int64) {
		t.Helper()
		s0, i0, runs := sent.Of("evalsha", "eval"), sent.Of("info"), m.Runs()
		m.Recovered()
		redistest.Eventually(t, 30*time.Second, what+": the run ends", func() bool { return m.Runs() > runs })
		return sent.Of("evalsha", "eval") - s0, sent.Of("info") - i0
	}

	if scripts, infos := recovery("the same master"); scripts != 0 || infos != 2 {
		t.Errorf("a recovery on the same master with %d pauses remembered: %d scripts, %d INFO; want 0, 2 (one identity read)", remembered, scripts, infos)
	}

	srv.Restart(t) // a new run_id, and no pause any more
	if n, err := rdb.Exists(ctx, "qg:{ups:0}:pause").Result(); err != nil || n != 0 {
		t.Fatalf("after the restart the pause exists: %d, %v", n, err)
	}
	recovery("a new master")
	if n := m.Reasserted(); n != remembered {
		t.Errorf("on a new master %d pauses re-asserted, want %d", n, remembered)
	}
	for key, u := range recorded {
		if v, err := rdb.Get(ctx, key).Int64(); err != nil || v < u {
			t.Fatalf("%s on the new master = %d, %v; want at least %d", key, v, err, u)
		}
	}

	if scripts, _ := recovery("the new master again"); scripts != 0 {
		t.Errorf("a second recovery on the new master: %d scripts, want 0", scripts)
	}
}

// TestProbeOneRoundTrip (cluster): a probe is one round trip to one
// master of the remembered pauses, whatever their number: a PING, or
// the identity read (two INFO commands) of a master whose identity is
// not known yet, each master's once; the masters are probed in turn.
func TestProbeOneRoundTrip(t *testing.T) {
	const remembered = 300
	ctx := context.Background()
	c := redistest.StartCluster(t)
	rdb := c.Client(t)
	sent := redistest.NewCommands()
	rdb.OnNewNode(func(n *redis.Client) { n.AddHook(sent) })
	st := store.New(store.Config{Client: rdb, Prefix: "qg", Timeout: 2 * time.Second, MaxPause: 12 * time.Hour})
	m := New(Config{Store: st, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(m.Close)
	m.probing = true // the test probes, not the timers
	keys := make([]string, 0, remembered)
	now := time.Now()
	for i := range remembered {
		k := schema.ScopeKeys("qg", "ups", strconv.Itoa(i)).Pause
		m.Note(k, now.UnixMilli()+60_000, now.UnixMilli(), now, false)
		keys = append(keys, k)
	}

	var pings, infos int64
	for i := range 9 {
		t0, p0, i0 := sent.Total(), sent.Of("ping"), sent.Of("info")
		if err := m.probe(ctx, keys); err != nil {
			t.Fatal(err)
		}
		dp, di, all := sent.Of("ping")-p0, sent.Of("info")-i0, sent.Total()-t0
		if !(dp == 1 && all == 1 || di == 2 && all == 2) {
			t.Errorf("probe %d with %d pauses remembered: %d commands (%d PING, %d INFO), want one PING or one identity read", i, remembered, all, dp, di)
		}
		pings, infos = pings+dp, infos+di
	}
	if infos != 2*3 || pings != 9-3 {
		t.Errorf("9 probes of 3 masters: %d identity reads and %d PINGs, want 3 and 6", infos/2, pings)
	}
	m.mu.Lock()
	known := len(m.ids)
	m.mu.Unlock()
	if known != 3 {
		t.Errorf("the identities of %d masters known, want 3", known)
	}
}
