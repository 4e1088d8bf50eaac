package redistest

// Clocks of their own, and replication cut. Every server of this package
// runs on the host's clock, so a failover between them shows no clock
// skew. FakeTime gives one server a clock offset from the host's
// (libfaketime, preloaded: Debian's faketime package), for the tests of
// what a skewed new master does to deadlines. CutReplication makes a
// replica miss every write from then on, deterministically, so that a
// test can lose a write in a failover on purpose.

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// FakeTimeLibs are where libfaketime is looked for (Debian's faketime
// package installs the first two; the MT build is for threaded programs
// such as redis-server, and is preferred).
var FakeTimeLibs = []string{
	"/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
	"/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
	"/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
	"/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
	"/usr/lib/faketime/libfaketimeMT.so.1",
	"/usr/local/lib/faketime/libfaketimeMT.so.1",
}

// FakeTime returns the environment that runs a process on the host's clock
// offset by offset (whole seconds; positive: ahead), through libfaketime.
// It skips the test when libfaketime is missing, or fails it when
// QUOTAGATE_REQUIRE_REDIS is set (apt-get install -y faketime).
func FakeTime(tb testing.TB, offset time.Duration) []string {
	tb.Helper()
	lib := ""
	for _, p := range FakeTimeLibs {
		if _, err := os.Stat(p); err == nil {
			lib = p
			break
		}
	}
	if lib == "" {
		if m, _ := filepath.Glob("/usr/lib/*/faketime/libfaketime*.so.1"); len(m) > 0 {
			lib = m[0]
		}
	}
	if lib == "" {
		if RequireRedis(os.Getenv(RequireEnv)) {
			tb.Fatalf("redistest: libfaketime not found (%v) and %s is set; install it: apt-get install -y faketime", FakeTimeLibs, RequireEnv)
		}
		tb.Skipf("redistest: libfaketime not found; skipping a test that needs a skewed clock (apt-get install -y faketime; set %s=1 to make this a failure)", RequireEnv)
	}
	sign := "+"
	if offset < 0 {
		sign = "-"
		offset = -offset
	}
	return []string{
		"LD_PRELOAD=" + lib,
		"FAKETIME=" + sign + strconv.FormatInt(int64(offset/time.Second), 10) + "s",
		"FAKETIME_DONT_FAKE_MONOTONIC=1", // the event loop's timers stay real
		"FAKETIME_DONT_RESET=1",
	}
}

// Time returns the server's TIME and the host's clock halfway through the
// round trip that read it, and the round trip's duration: the server's
// clock runs ahead of the host's by about server − host, within half the
// round trip.
func (s *Server) Time(tb testing.TB) (server, host time.Time, rtt time.Duration) {
	tb.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, PoolSize: 1})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil { // dial first: the round trip is TIME's alone
		tb.Fatalf("redistest: PING %s: %v", s.Addr, err)
	}
	before := time.Now()
	server, err := rdb.Time(ctx).Result()
	after := time.Now()
	if err != nil {
		tb.Fatalf("redistest: TIME on %s: %v", s.Addr, err)
	}
	return server, before.Add(after.Sub(before) / 2), after.Sub(before)
}

// CutReplication makes the replica s miss every write of its master from
// now on, until it is promoted: it sets a masterauth its master refuses
// (the master has no password, and a replica that sends AUTH to it fails
// its handshake) and kills its link to the master, then waits until the
// replica reports its link down and the master no longer lists it. The
// replica stays a replica in every other way: a failover may still promote
// it, without the writes made since.
func (s *Server) CutReplication(tb testing.TB, master string) {
	tb.Helper()
	s.mustOwn(tb, "CutReplication")
	ctx, cancel := context.WithTimeout(context.Background(), failoverTimeout)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, PoolSize: 1})
	defer rdb.Close()
	if err := rdb.ConfigSet(ctx, "masterauth", "redistest-refused").Err(); err != nil {
		tb.Fatalf("redistest: CONFIG SET masterauth on %s: %v", s.Addr, err)
	}
	if err := rdb.Do(ctx, "client", "kill", "type", "master").Err(); err != nil {
		tb.Fatalf("redistest: CLIENT KILL TYPE master on %s: %v", s.Addr, err)
	}
	m := redis.NewClient(&redis.Options{Addr: master, MaxRetries: -1, PoolSize: 1})
	defer m.Close()
	err := poll(ctx, func() (bool, string) {
		info, err := rdb.Info(ctx, "replication").Result()
		if err != nil {
			return false, err.Error()
		}
		if st := parseInfo(info)["master_link_status"]; st != "down" {
			return false, s.Addr + " master_link_status:" + st
		}
		info, err = m.Info(ctx, "replication").Result()
		if err != nil {
			return false, err.Error()
		}
		if n := parseInfo(info)["connected_slaves"]; n != "0" {
			return false, master + " connected_slaves:" + n
		}
		return true, ""
	})
	if err != nil {
		tb.Fatalf("redistest: cutting the replication of %s from %s: %v", s.Addr, master, err)
	}
}
