package store

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
)

// TestHangBoundsGoroutines: while the store's Redis hangs (SIGSTOP for 5 s)
// under 20 workers calling the store in a loop, the goroutines the store
// leaves running stay bounded: at most one per worker for the calls already
// running when the hang began, plus the cap (maxRunning); once those have
// run out their time (the client's 1 s read timeout), only the cap. Beyond
// the cap the store answers at once. Before the cap every call abandoned at
// the store bound kept its goroutine until the read timeout, all along the
// hang. Not parallel: it counts the goroutines of the whole process.
func TestHangBoundsGoroutines(t *testing.T) {
	const (
		workers     = 20
		hang        = 5 * time.Second
		readTimeout = time.Second // the client's: how long an abandoned call runs on
		// lateFrom starts the part of the hang where the calls running
		// at its start have long run out their read timeout.
		lateFrom = hang / 2
		// slack: timers firing, go-redis's pool bookkeeping and dialers.
		slack = 10
		// timeout is the store's bound: the gate's default StoreTimeout.
		timeout = 250 * time.Millisecond
	)
	srv := redistest.StartPrivate(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: readTimeout})
	t.Cleanup(func() { rdb.Close() })
	prefix := srv.Prefix(t)
	st := New(Config{Client: rdb, Prefix: prefix, Timeout: timeout, MaxPause: 12 * time.Hour})
	ctx := context.Background()
	k := scopeKeys(prefix, "hang")
	dryAdmission := admitRequest(1, 0)
	dryAdmission.Dry = true
	if _, err := st.Admit(ctx, k, dryAdmission); err != nil {
		t.Fatal(err)
	}
	// A warm pool, as a busy gate's is: one connection per worker (a call
	// waiting for a new connection also has go-redis dial it in a goroutine
	// of its own).
	var warm sync.WaitGroup
	for range workers {
		warm.Go(func() { rdb.BLPop(ctx, 100*time.Millisecond, k.Pause+":warm") })
	}
	warm.Wait()
	if n := rdb.PoolStats().IdleConns; n < workers {
		t.Logf("only %d idle connections after warming the pool", n)
	}
	runtime.GC()
	base := runtime.NumGoroutine()

	srv.Suspend(t)
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume(t)
		}
	}()
	var stop atomic.Bool
	var calls, atOnce atomic.Int64
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := scopeKeys(prefix, "hang", strconv.Itoa(i))
			for !stop.Load() {
				start := time.Now()
				_, err := st.Admit(ctx, k, dryAdmission)
				calls.Add(1)
				if !errors.Is(err, ErrTimeout) {
					t.Errorf("a call on a suspended Redis: %v, want ErrTimeout", err)
					return
				}
				if time.Since(start) < timeout/2 {
					atOnce.Add(1)
				}
				time.Sleep(5 * time.Millisecond) // the task, run or deferred
			}
		}()
	}
	began := time.Now()
	peak, late := 0, 0
	for time.Since(began) < hang {
		n := runtime.NumGoroutine() - base - workers
		peak = max(peak, n)
		if time.Since(began) >= lateFrom {
			late = max(late, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	srv.Resume(t)
	resumed = true

	t.Logf("Redis hung %v under %d workers: at most %d goroutines beyond the workers' own (%d after %v); %d calls, %d answered at once; cap %d",
		hang, workers, peak, late, lateFrom, calls.Load(), atOnce.Load(), maxRunning)
	// Before any call has failed, each worker may have one call running
	// and, on a loaded machine, a second one started before the first
	// failure is seen: the peak is bounded by the workers, not by time.
	// Once the store is known to fail, only the cap remains (below).
	if peak > 2*workers+maxRunning+slack {
		t.Errorf("%d goroutines beyond the workers' own at peak, want at most two per worker + the cap %d + %d", peak, maxRunning, slack)
	}
	if late > maxRunning+slack {
		t.Errorf("%d goroutines beyond the workers' own after %v of the hang, want at most the cap %d + %d", late, lateFrom, maxRunning, slack)
	}
	if atOnce.Load() == 0 {
		t.Error("no call was answered at once: the cap was never reached")
	}
	eventually(t, 10*time.Second, "the store answers again after the hang", func() bool {
		_, err := st.Admit(ctx, k, dryAdmission)
		return err == nil
	})
}
