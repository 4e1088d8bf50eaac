package redistest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestFaults: a private server can be killed and restarted on its port (its
// data gone, a new process answering), and suspended (nothing answers) and
// resumed; the shared server refuses faults.
func TestFaults(t *testing.T) {
	s := StartPrivate(t)
	if s == Start(t) {
		t.Fatal("StartPrivate returned the shared server")
	}
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, ReadTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	pid := s.current().cmd.Process.Pid

	s.Kill(t)
	if !s.exited() {
		t.Fatal("after Kill the process still runs")
	}
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered by a killed server")
	}
	s.Restart(t)
	if s.current().cmd.Process.Pid == pid {
		t.Error("Restart kept the old process")
	}
	if err := rdb.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("GET after a restart: %v, want nil reply (no persistence)", err)
	}

	s.Suspend(t)
	err := rdb.Ping(ctx).Err()
	var ne interface{ Timeout() bool }
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("PING on a suspended server: %v, want a read timeout", err)
	}
	s.Resume(t)
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Errorf("PING after Resume: %v", err)
	}

	ftb := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); Start(t).Kill(ftb) }()
	<-done
	if !ftb.failed || Start(t).exited() {
		t.Errorf("Kill on the shared server: failed=%v (%q); want a failure and the server untouched", ftb.failed, ftb.msg)
	}
}
