package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/feed"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/internal/schema"
)

// durableWait bounds the wait for a promoted replica to take its master's
// place.
const durableWait = 60 * time.Second

// foDurableScript is a pause's shape: the later of the stored deadline and
// ARGV[1] (ms), stored with expiry at that instant; it returns the deadline
// in force.
var foDurableScript = redis.NewScript(`
local d = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), tonumber(ARGV[1]))
redis.call('SET', KEYS[1], d, 'PXAT', d)
return d`)

// durableTarget is a replicated Redis for runDurably: a client, and where
// a key's master and its replica are.
type durableTarget struct {
	rdb     redis.UniversalClient
	prefix  string
	replica func(t *testing.T, key string) (*redis.Client, *redistest.Server) // a reader of key's replica, and that replica
	kill    func(t *testing.T, key string)                                    // kill key's master and wait for the promotion
}

func TestFailoverDurableCluster(t *testing.T) {
	t.Parallel()
	c := redistest.StartReplicatedCluster(t)
	rdb := c.Client(t)
	master := func(t *testing.T, key string) string {
		m, err := rdb.MasterForKey(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		return m.Options().Addr
	}
	runDurableChecks(t, durableTarget{
		rdb:    rdb,
		prefix: c.Prefix(t),
		replica: func(t *testing.T, key string) (*redis.Client, *redistest.Server) {
			r := c.ReplicaOf(t, master(t, key))
			return c.NodeClient(t, r, true), c.Node(t, r)
		},
		kill: func(t *testing.T, key string) { c.KillMaster(t, master(t, key)) },
	})
}

func TestFailoverDurableSentinel(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t)
	runDurableChecks(t, durableTarget{
		rdb:    s.Client(t),
		prefix: s.Prefix(t),
		replica: func(t *testing.T, _ string) (*redis.Client, *redistest.Server) {
			r := s.Replica(t)
			return s.NodeClient(t, r), s.Node(t, r)
		},
		kill: func(t *testing.T, _ string) { s.KillMaster(t) },
	})
}

// runDurableChecks: a write runDurably acknowledged is on the replica when
// it returns (read there at once, no polling); with the replica suspended the write is reported
// not replicated (errNotReplicated) yet in force on the master; after the
// master's loss runDurably finds the promoted replica and reports that it
// has no replica of its own.
func runDurableChecks(t *testing.T, d durableTarget) {
	ctx := context.Background()
	key := "{" + d.prefix + ":durable}:pause"
	at := func(ahead time.Duration) int64 { return time.Now().Add(ahead).UnixMilli() }
	reader, replica := d.replica(t, key)

	want := at(time.Minute)
	v, acked, err := runDurably(ctx, d.rdb, key, 1, time.Second, foDurableScript, []string{key}, want)
	if err != nil || acked < 1 {
		t.Fatalf("runDurably = %v, %d acknowledged, %v; want 1 replica", v, acked, err)
	}
	if got, err := reader.Get(ctx, key).Int64(); err != nil || got != want {
		t.Fatalf("on the replica right after runDurably: %s = %d, %v; want %d", key, got, err, want)
	}
	if got, err := reader.PExpireTime(ctx, key).Result(); err != nil || got.Milliseconds() != want {
		t.Errorf("on the replica: PEXPIRETIME %s = %v, %v; want %d", key, got, err, want)
	}

	// A replica that does not answer: the write is in force, not durable.
	replica.Suspend(t)
	later := at(2 * time.Minute)
	v, acked, err = runDurably(ctx, d.rdb, key, 1, 100*time.Millisecond, foDurableScript, []string{key}, later)
	replica.Resume(t)
	var nr *notReplicatedError
	if !errors.Is(err, errNotReplicated) || !errors.As(err, &nr) || nr.Acked != 0 || nr.Want != 1 || acked != 0 {
		t.Errorf("with the replica suspended: runDurably = %v, %d acknowledged, %v; want errNotReplicated, 0 of 1", v, acked, err)
	}
	if got, ok := v.(int64); !ok || got != later {
		t.Errorf("with the replica suspended: the script's reply %v (%T), want %d: the write ran", v, v, later)
	}

	checkDurableAnnounce(t, d)

	// The master is lost: runDurably reaches the promoted replica, which
	// has the deadline and no replica of its own.
	d.kill(t, key)
	began := time.Now()
	eventually(t, durableWait, "runDurably reaches the new master", func() bool {
		v, acked, err = runDurably(ctx, d.rdb, key, 1, 100*time.Millisecond, foDurableScript, []string{key}, want)
		return errors.Is(err, errNotReplicated)
	})
	t.Logf("runDurably reached the new master %v after the promotion", time.Since(began).Round(time.Millisecond))
	if got, ok := v.(int64); !ok || got < later || acked != 0 {
		t.Errorf("on the new master: runDurably = %v, %d acknowledged, %v; want the deadline %d kept, 0 replicas", v, acked, err, later)
	}
}

// BenchmarkDurableWrite is what Config.Durable costs a pause: the plain
// script against the same script followed by WAIT for one replica, on a
// Sentinel-managed master with one replica (a fresh one per run).
func BenchmarkDurableWrite(b *testing.B) {
	s := redistest.StartSentinel(b)
	rdb := s.Client(b)
	key := "{" + s.Prefix(b) + ":durable}:pause"
	want := time.Now().Add(time.Hour).UnixMilli()
	ctx := context.Background()
	b.Run("plain", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if err := foDurableScript.Run(ctx, rdb, []string{key}, want+int64(i)).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("wait-1", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, acked, err := runDurably(ctx, rdb, key, 1, time.Second, foDurableScript, []string{key}, want+int64(i)); err != nil || acked < 1 {
				b.Fatalf("runDurably: %d acknowledged, %v", acked, err)
			}
		}
	})
}

// checkDurableAnnounce: a store with Durable set appends its announcements
// as it records its pauses: the entry is on the replica of the feed
// group's master when the append returns, and with that replica suspended
// it is appended all the same and logged as not acknowledged.
func checkDurableAnnounce(t *testing.T, d durableTarget) {
	ctx := context.Background()
	var logged redistest.Buffer
	s := New(Config{Client: d.rdb, Prefix: d.prefix, Timeout: time.Second, Durable: 1, Log: slog.New(slog.NewTextHandler(&logged, nil))})
	e := feed.Entry{Key: schema.ScopeKeys(d.prefix, "ups", "durable").Pause, UntilMs: time.Now().Add(time.Minute).UnixMilli(), NowMs: time.Now().UnixMilli()}
	_, keys, _ := feed.AppendCall(d.rdb, d.prefix, e)
	reader, replica := d.replica(t, keys[0])
	if err := s.appendEntry(ctx, e); err != nil {
		t.Fatalf("a durable append: %v", err)
	}
	last, err := reader.XRevRangeN(ctx, keys[0], "+", "-", 1).Result()
	if err != nil || len(last) != 1 || !strings.Contains(fmt.Sprint(last[0].Values), e.Key) {
		t.Errorf("on the replica right after a durable append: %v, %v; want the entry of %s", last, err, e.Key)
	}
	replica.Suspend(t)
	err = s.appendEntry(ctx, e)
	replica.Resume(t)
	if err != nil || !strings.Contains(logged.String(), "fewer replicas than Config.Durable") {
		t.Errorf("a durable append with the replica suspended: %v, logged %q; want appended, and logged as not acknowledged", err, logged.String())
	}
}
