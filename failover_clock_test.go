package quotagate

// Clocks across nodes, and finding the new master on go-redis's defaults.

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/failover"
	"github.com/quotagate/quotagate/internal/redistest"
)

// TestFailoverClockSkew: a Sentinel whose replica runs on a clock skewed
// by a preloaded clock shim (redistest.SkewedClock), ahead and behind. After the replica's promotion, a pause
// recorded on the old master keeps its absolute deadline, so by the new
// master's clock it ends the skew early (ahead) or late (behind): shown by
// a gate that remembers nothing. A gate that remembered it re-asserts it
// when the new master answers, on the clock ahead, to its true end (within
// the measure's own round trips, never earlier); on the clock behind it
// leaves it (a pause cannot move earlier).
func TestFailoverClockSkew(t *testing.T) {
	t.Parallel()
	const skew = 4 * time.Second
	for _, c := range []struct {
		name  string
		shift time.Duration // the new master's clock minus the old one's
	}{{"ahead", skew}, {"behind", -skew}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			runClockSkew(t, c.shift)
		})
	}
}

func runClockSkew(t *testing.T, shift time.Duration) {
	ctx := context.Background()
	s := redistest.StartSentinelWith(t, redistest.SentinelOptions{ReplicaEnv: redistest.SkewedClock(t, shift)})
	replica := s.Node(t, s.Replica(t))
	master := s.Node(t, s.Master(t))
	rt, rh, rrtt := replica.Time(t)
	mt, mh, mrtt := master.Time(t)
	measured := rt.Sub(rh) - mt.Sub(mh)
	t.Logf("the replica's clock minus the master's: %v (set %v; round trips %v, %v)", measured.Round(time.Millisecond), shift, rrtt, mrtt)
	if d := measured - shift; d < -time.Second || d > time.Second {
		t.Fatalf("the replica's clock is %v off the master's, want %v: the clock shim did not apply", measured, shift)
	}

	remembers := New(s.Client(t), Config{Prefix: s.Prefix(t), StoreTimeout: foStoreTimeout})
	forgets := New(s.Client(t), Config{Prefix: s.Prefix(t), StoreTimeout: foStoreTimeout})
	forgets.mem = nil
	defer remembers.Close()
	defer forgets.Close()
	sc := Scope{Provider: "skew", Account: "a"}
	type recorded struct {
		p      Pause
		t0, t1 time.Time // around the Pause: its true end is within [t0, t1] + p.Remaining
	}
	pause := func(g *Gate) recorded {
		t0 := time.Now()
		p, err := g.Pause(ctx, sc, 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return recorded{p, t0, time.Now()}
	}
	rA, rN := pause(remembers), pause(forgets) // each on its own prefix

	// Both pauses on the replica before the kill: this test is about its
	// clock, not about a lost write (TestFailoverLostPause is).
	rc := s.NodeClient(t, s.Replica(t))
	eventuallyWithin(t, foWait, "the replica has both pauses", func() bool {
		for _, g := range []*Gate{remembers, forgets} {
			if n, err := rc.Exists(ctx, scopeKeys(g.cfg.Prefix, sc).Pause).Result(); err != nil || n != 1 {
				return false
			}
		}
		return true
	})
	s.KillMaster(t)
	promotedAt := time.Now()
	// endShift returns the bounds of how much later than the recorded
	// pause's true end the scope ends now, by the host's clock.
	endShift := func(g *Gate, r recorded) (lo, hi time.Duration, st Pause) {
		u0 := time.Now()
		st, err := g.State(ctx, sc)
		u1 := time.Now()
		if err != nil {
			return 0, 0, Pause{}
		}
		const ms = time.Millisecond // Remaining is truncated to the millisecond
		return u0.Add(st.Remaining).Sub(r.t1.Add(r.p.Remaining)) - ms, u1.Add(st.Remaining).Sub(r.t0.Add(r.p.Remaining)) + ms, st
	}
	var lo, hi time.Duration
	var st Pause
	eventuallyWithin(t, foWait, "the gate answers after the failover", func() bool {
		lo, hi, st = endShift(forgets, rN)
		return !st.Until.IsZero()
	})
	t.Logf("remembering nothing: the deadline after the promotion %v (recorded %v); the pause ends %v to %v later than it should", st.Until, rN.p.Until, lo.Round(time.Millisecond), hi.Round(time.Millisecond))
	if !st.Until.Equal(rN.p.Until) {
		t.Errorf("without re-assertion the deadline is %v after the promotion, want the recorded %v: absolute instants survive a failover", st.Until, rN.p.Until)
	}
	if -shift < lo || -shift > hi {
		t.Errorf("without re-assertion the pause ends [%v, %v] later than it should, want %v (the skew)", lo, hi, -shift)
	}

	if shift > 0 {
		eventuallyWithin(t, foStoreTimeout+foSlack+failover.ProbeEvery, "the gate that remembers re-asserts the pause", func() bool {
			return remembers.mem.Reasserted() > 0
		})
		t.Logf("re-asserted %v after the promotion", time.Since(promotedAt).Round(time.Millisecond))
	} else {
		time.Sleep(foStoreTimeout + foSlack + failover.ProbeEvery) // time enough to re-assert, had it wanted to
		if n := remembers.mem.Reasserted(); n != 0 {
			t.Errorf("on a clock behind, the gate re-asserted %d pauses, want none (nothing ends early)", n)
		}
	}
	lo, hi, st = endShift(remembers, rA)
	t.Logf("remembering: the deadline %v (recorded %v); the pause ends %v to %v later than it should", st.Until, rA.p.Until, lo.Round(time.Millisecond), hi.Round(time.Millisecond))
	want0, want1 := max(-shift, 0), max(-shift, 0)+2*foStoreTimeout
	if hi < want0 || lo > want1 {
		t.Errorf("with re-assertion the pause ends [%v, %v] later than it should, want within [%v, %v]", lo, hi, want0, want1)
	}
}

// TestFailoverClusterDefaultReload: on a ClusterClient with go-redis's
// defaults (its layout reloaded every 60 s), the gate answers from the
// promoted replica within the store bound and a couple of seconds of the
// promotion, while a bare client of the same defaults still sends to the
// dead master.
func TestFailoverClusterDefaultReload(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := redistest.StartReplicatedCluster(t)
	defaults := func() *redis.ClusterClient {
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: append(append([]string{}, c.Addrs...), c.Replicas...)})
		t.Cleanup(func() { rdb.Close() })
		return rdb
	}
	rdb, bare := defaults(), defaults()
	if iv := rdb.Options().ClusterStateReloadInterval; iv != 60*time.Second {
		t.Fatalf("go-redis's default ClusterStateReloadInterval is %v; this test assumes a minute", iv)
	}
	g := New(rdb, Config{Prefix: c.Prefix(t), StoreTimeout: foStoreTimeout})
	defer g.Close()
	sc := Scope{Provider: "reload", Account: "a"}
	k := scopeKeys(g.cfg.Prefix, sc)
	p, err := g.Pause(ctx, sc, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := bare.Get(ctx, k.Pause).Err(); err != nil { // its layout is loaded
		t.Fatal(err)
	}
	m, err := rdb.MasterForKey(ctx, k.Pause)
	if err != nil {
		t.Fatal(err)
	}
	c.KillMaster(t, m.Options().Addr)
	promotedAt := time.Now()
	// The pause is on the new master: replicated before the kill, or
	// re-asserted by the gate once the new master answered.
	var st Pause
	eventuallyWithin(t, foWait, "the gate answers from the new master, paused", func() bool {
		st, err = g.State(ctx, sc)
		return err == nil && !st.Until.Before(p.Until)
	})
	took := time.Since(promotedAt)
	bareErr := bare.Get(ctx, k.Pause).Err()
	t.Logf("the gate answered from the new master, paused, %v after the promotion (re-asserted: %d); a bare client with the same defaults then: %v",
		took.Round(time.Millisecond), g.mem.Reasserted(), bareErr)
	if took > foStoreTimeout+foSlack {
		t.Errorf("the gate answered %v after the promotion, want within %v", took, foStoreTimeout+foSlack)
	}
	if bareErr == nil {
		t.Error("a bare client with go-redis's defaults reached the new master at once: the test shows nothing")
	}
}
