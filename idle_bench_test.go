package quotagate_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate"
	"github.com/quotagate/quotagate/internal/feed"
	"github.com/quotagate/quotagate/internal/redistest"
)

// BenchmarkIdleGates shows what gates with nothing to admit cost Redis:
// idle gates (each on a client of its own, its feed started by one
// admission of a scope of its own) remember every pause that another gate
// announces, idleRate a second, on top of a number already in force
// (remembered=); each iteration watches them for a second.
// A go-redis hook on the idle gates' clients counts what they send
// (go-redis's handshake of a new connection aside):
//
//   - feed/s/gate: the feed's polls and snapshots per second per idle
//     gate (internal/feed);
//   - cmds/s/gate: every other command per second per idle gate;
//   - scripts/s/gate: of which the store's scripts: re-assertions.
//
// In steady, nothing fails; in recovered, every iteration kills every
// connection of the idle gates once (CLIENT KILL TYPE normal; their
// clients retry nothing), so their feed fails and catches up on the same
// master: a recovery that lost nothing. The first recovery of
// each gate, before the count, re-asserts the few pauses it remembered
// before it knew the master's identity (internal/failover). Each case runs on a
// redis-server of its own (redistest.StartPrivate).
//
// Run:
//
//	go test -run '^$' -bench BenchmarkIdleGates -benchtime 5x .
func BenchmarkIdleGates(b *testing.B) {
	for _, kind := range []string{"steady", "recovered"} {
		for _, idle := range []int{50, 200} {
			for _, inForce := range []int{100, 1000} {
				b.Run(fmt.Sprintf("%s/idle=%d/remembered=%d", kind, idle, inForce), func(b *testing.B) {
					runIdleGates(b, idle, inForce, kind == "recovered")
				})
			}
		}
	}
}

// idleRate is how many pauses a second the busy gate announces while
// the idle gates are watched.
const idleRate = 50

func runIdleGates(b *testing.B, idle, inForce int, recover bool) {
	ctx := context.Background()
	srv := redistest.StartPrivate(b)
	prefix := srv.Prefix(b)
	sent := redistest.NewCommands()
	sent.Name = feed.CommandName
	admit := func(g *quotagate.Gate, s quotagate.Scope) error {
		return g.Middleware()(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })).
			ProcessTask(ctx, quotagate.NewTask("poll", nil, s))
	}
	for i := range idle {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
		rdb.AddHook(sent)
		b.Cleanup(func() { rdb.Close() })
		g := quotagate.New(rdb, quotagate.Config{Prefix: prefix})
		b.Cleanup(func() { g.Close() })
		if err := admit(g, quotagate.Scope{Provider: "warm", Account: strconv.Itoa(i)}); err != nil {
			b.Fatal(err)
		}
	}
	busy := quotagate.New(srv.Client(b), quotagate.Config{Prefix: prefix})
	defer busy.Close()
	n, failed := 0, 0
	pause := func() {
		if _, err := busy.Pause(ctx, quotagate.Scope{Provider: "busy", Account: strconv.Itoa(n)}, 10*time.Minute); err != nil {
			failed++
		}
		n++
	}
	for range inForce {
		pause()
	}
	admin := srv.Client(b)
	kill := func() {
		if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal").Err(); err != nil {
			b.Fatal(err)
		}
	}
	// Every announcement heard and every first probe made; the pauses a
	// gate remembered before it knew the master's identity are
	// re-asserted at its first recovery, once: not counted.
	time.Sleep(time.Second)
	if recover {
		kill()
	}
	time.Sleep(time.Second)
	stop, done := make(chan struct{}), sync.WaitGroup{}
	done.Add(1)
	go func() {
		defer done.Done()
		tick := time.NewTicker(time.Second / idleRate)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				pause()
			}
		}
	}()
	fed := func() int64 { return sent.Of("feed") }
	scripted := func() int64 { return sent.Of("evalsha", "eval") }
	cmds, feeds, scripts, start := sent.Total()-fed(), fed(), scripted(), time.Now()
	for b.Loop() {
		if recover {
			kill()
		}
		time.Sleep(time.Second)
	}
	secs := time.Since(start).Seconds()
	cmds, feeds, scripts = sent.Total()-fed()-cmds, fed()-feeds, scripted()-scripts
	close(stop)
	done.Wait()
	if failed > 0 {
		b.Logf("%d of %d pauses not recorded (the store failed)", failed, n)
	}
	b.ReportMetric(float64(feeds)/secs/float64(idle), "feed/s/gate")
	b.ReportMetric(float64(cmds)/secs/float64(idle), "cmds/s/gate")
	b.ReportMetric(float64(scripts)/secs/float64(idle), "scripts/s/gate")
	b.ReportMetric(float64(n), "pauses")
}
