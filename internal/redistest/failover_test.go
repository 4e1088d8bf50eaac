package redistest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// checkReplicatedExpiry writes key with a relative TTL through w and
// checks that the replica (read through r) holds the same value with the
// same absolute expiry instant (PEXPIRETIME), as Redis replicates it.
func checkReplicatedExpiry(t *testing.T, w, master, replica redis.Cmdable, key string) (expireAt int64) {
	t.Helper()
	ctx := context.Background()
	if err := w.Set(ctx, key, "v", time.Minute).Err(); err != nil {
		t.Fatalf("SET %s PX: %v", key, err)
	}
	at, err := master.PExpireTime(ctx, key).Result()
	if err != nil || at <= 0 {
		t.Fatalf("PEXPIRETIME %s on the master = %v, %v", key, at, err)
	}
	var got time.Duration
	var v string
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if v, err = replica.Get(ctx, key).Result(); err == nil {
			got, err = replica.PExpireTime(ctx, key).Result()
			break
		}
	}
	if err != nil || v != "v" || got.Milliseconds() != at.Milliseconds() {
		t.Fatalf("on the replica %s = %q, expires at %v (%v); want %q expiring at %v, the master's instant", key, v, got, err, "v", at)
	}
	return at.Milliseconds()
}

// TestReplicatedCluster: three masters with a replica each; a key's TTL
// reaches its replica as the same absolute instant; a graceful failover
// and a killed master each promote the replica, and a cluster client finds
// the new masters and still reads the keys with their expiry unchanged.
// The shared cluster refuses failovers.
func TestReplicatedCluster(t *testing.T) {
	t.Parallel()
	c := StartReplicatedCluster(t)
	if len(c.Addrs) != ClusterMasters || len(c.Replicas) != ClusterMasters {
		t.Fatalf("masters %v, replicas %v; want %d of each", c.Addrs, c.Replicas, ClusterMasters)
	}
	rdb := c.Client(t)
	ctx := context.Background()
	prefix := c.Prefix(t)

	// Two keys on two different masters.
	keys := map[string]string{} // master → key
	for i := 0; len(keys) < 2; i++ {
		k := fmt.Sprintf("%s:k%d", prefix, i)
		m, err := rdb.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := keys[m.Options().Addr]; !ok {
			keys[m.Options().Addr] = k
		}
	}
	expiry := map[string]int64{}
	var masters []string
	for m, k := range keys {
		masters = append(masters, m)
		expiry[k] = checkReplicatedExpiry(t, rdb, c.NodeClient(t, m, false), c.NodeClient(t, c.ReplicaOf(t, m), true), k)
	}

	began := time.Now()
	graceful := c.Failover(t, masters[0])
	t.Logf("CLUSTER FAILOVER took %v", time.Since(began).Round(time.Millisecond))
	began = time.Now()
	killed := c.KillMaster(t, masters[1])
	t.Logf("a killed master replaced after %v", time.Since(began).Round(time.Millisecond))
	now := c.Masters(t)
	for _, want := range []string{graceful, killed} {
		if !slices.Contains(now, want) {
			t.Errorf("masters after the failovers %v, want %s among them", now, want)
		}
	}
	if slices.Contains(now, masters[0]) || slices.Contains(now, masters[1]) {
		t.Errorf("masters after the failovers %v still hold %s or %s", now, masters[0], masters[1])
	}
	for m, k := range keys {
		var at time.Duration
		var err error
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if at, err = rdb.PExpireTime(ctx, k).Result(); err == nil {
				break
			}
		}
		if err != nil || at.Milliseconds() != expiry[k] {
			t.Errorf("after the failover of %s: PEXPIRETIME %s = %v, %v; want %d ms, the instant the old master set", m, k, at, err, expiry[k])
		}
	}
	if err := rdb.Set(ctx, prefix+":after", "x", 0).Err(); err != nil {
		t.Errorf("SET after the failovers: %v", err)
	}

	ftb := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); StartCluster(t).KillMaster(ftb, StartCluster(t).Addrs[0]) }()
	<-done
	if !ftb.failed {
		t.Error("KillMaster on the shared cluster did not fail")
	}
}

// TestSentinel: a primary and a replica under a Sentinel; a key's TTL
// reaches the replica as the same instant; SENTINEL FAILOVER and a killed
// primary each promote the other node, and a failover client follows and
// writes again.
func TestSentinel(t *testing.T) {
	t.Parallel()
	s := StartSentinel(t)
	rdb := s.Client(t)
	ctx := context.Background()
	prefix := s.Prefix(t)
	first := s.Master(t)
	key := prefix + ":k"
	at := checkReplicatedExpiry(t, rdb, s.NodeClient(t, first), s.NodeClient(t, s.Replica(t)), key)

	began := time.Now()
	second := s.Failover(t)
	t.Logf("SENTINEL FAILOVER took %v", time.Since(began).Round(time.Millisecond))
	began = time.Now()
	if second == first || s.Master(t) != second {
		t.Fatalf("after SENTINEL FAILOVER the primary is %s (was %s)", s.Master(t), first)
	}
	third := s.KillMaster(t)
	t.Logf("a killed primary replaced after %v", time.Since(began).Round(time.Millisecond))
	if third != first {
		t.Fatalf("after killing %s the primary is %s, want the old primary %s", second, third, first)
	}
	var got time.Duration
	var err error
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if err = rdb.Set(ctx, prefix+":after", "x", 0).Err(); err == nil {
			got, err = rdb.PExpireTime(ctx, key).Result()
			break
		}
	}
	if err != nil || got.Milliseconds() != at {
		t.Errorf("after two failovers: PEXPIRETIME %s = %v, %v; want %d ms", key, got, err, at)
	}
}
