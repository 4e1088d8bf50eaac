package quotagate_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate"
)

// exampleRedis starts an in-memory Redis whose clock (TIME, the gate's only
// clock) is frozen, so the examples print the same deadlines every run.
// Use your own Redis in real code.
func exampleRedis() (*redis.Client, func()) {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	mr.SetTime(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	return rdb, func() { rdb.Close(); mr.Close() }
}

// A 429 told one worker to wait 15 s: Pause shares that with every worker.
// The deadline only moves later: a shorter pause proposed meanwhile keeps
// it.
func ExampleGate_Pause() {
	rdb, done := exampleRedis()
	defer done()
	g := quotagate.New(rdb, quotagate.Config{})
	ctx := context.Background()
	ups := quotagate.Scope{Provider: "ups", Account: "acct-42"}

	p, err := g.Pause(ctx, ups, 15*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println(p)

	p, _ = g.Pause(ctx, ups, 5*time.Second) // a shorter hint from a peer
	fmt.Println(p)

	rem, _ := g.Remaining(ctx, ups)
	fmt.Println("ups remaining:", rem)
	rem, _ = g.Remaining(ctx, quotagate.Scope{Provider: "fedex"})
	fmt.Println("fedex remaining:", rem)

	g.Resume(ctx, ups)
	rem, _ = g.Remaining(ctx, ups)
	fmt.Println("after Resume:", rem)
	// Output:
	// ups/acct-42 paused for 15s (until 2025-01-02T03:04:20.000Z)
	// ups/acct-42 paused for 15s (until 2025-01-02T03:04:20.000Z)
	// ups remaining: 15s
	// fedex remaining: 0s
	// after Resume: 0s
}

// A credential is a secret: its fingerprint names the quota instead, in
// Redis keys, task headers, errors and logs.
func ExampleFingerprint() {
	account := quotagate.Fingerprint("sk_live_51HqLyjWDarjtT1zdp7dc")
	fmt.Println(account)
	fmt.Println(quotagate.Scope{Provider: "stripe", Account: account})
	// Output:
	// fp:2543c60dff12709b54ee918f
	// stripe/fp:2543c60dff12709b54ee918f
}

// The scope travels in the task's headers; uniqueness per tracking number
// stays asynq's business (TaskID).
func ExampleNewTask() {
	ups := quotagate.Scope{Provider: "ups", Account: "acct-42"}
	task := quotagate.NewTask("tracking:poll", []byte(`{"number":"1Z999"}`), ups,
		asynq.TaskID("poll:ups:1Z999"), asynq.MaxRetry(3))

	s, ok := quotagate.ScopeOf(task)
	fmt.Println(s, ok)
	fmt.Println("max retry:", task.Headers()["quotagate-max-retry"])

	_, ok = quotagate.ScopeOf(asynq.NewTask("report:daily", nil))
	fmt.Println("plain asynq task:", ok)
	// Output:
	// ups/acct-42 true
	// max retry: 3
	// plain asynq task: false
}

// RetryDelay turns the gate's errors into asynq retry times: a refusal waits
// its hint, or the shared pause when that is longer; without a hint it waits
// the shared pause, or, when its pause could not be recorded (as here: the
// refusals never went through the Middleware), a capped exponential fallback
// by attempt. asynq stores retry times in whole
// seconds, so every delay is rounded up to end on a whole second of the
// worker's clock (shown here truncated to the second).
func ExampleGate_RetryDelay() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"}) // RetryDelay never calls Redis
	defer rdb.Close()
	g := quotagate.New(rdb, quotagate.Config{})
	delay := g.RetryDelay(nil) // asynq.Config.RetryDelayFunc
	show := func(d time.Duration) { fmt.Println(d.Truncate(time.Second)) }

	show(delay(0, &quotagate.Refusal{Hint: 15 * time.Second}, nil))
	show(delay(0, fmt.Errorf("poll: %w", &quotagate.Refusal{}), nil)) // no readable hint
	show(delay(3, &quotagate.Refusal{}, nil))
	show(delay(0, &quotagate.Deferral{Delay: 8 * time.Second}, nil))
	// Output:
	// 15s
	// 15m0s
	// 2h0m0s
	// 8s
}

// The quick start: register the Middleware on the ServeMux and IsFailure and
// RetryDelay in asynq.Config. While a peer's refusal pauses the scope, the
// handler (and the provider client it would resolve) does not run: the
// task is deferred without spending a retry.
func ExampleGate_Middleware() {
	rdb, done := exampleRedis()
	defer done()
	g := quotagate.New(rdb, quotagate.Config{})

	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		IsFailure:      quotagate.IsFailure,
		RetryDelayFunc: g.RetryDelay(nil),
	})
	_ = srv // srv.Run(mux) in a real worker

	calls := 0
	mux := asynq.NewServeMux()
	mux.Use(g.Middleware())
	mux.HandleFunc("tracking:poll", func(ctx context.Context, t *asynq.Task) error {
		calls++
		// Resolve the provider client and poll. When the provider refuses:
		//	return &quotagate.Refusal{Hint: hint} // hint from hint.From(resp, body)
		return nil
	})

	ctx := context.Background()
	ups := quotagate.Scope{Provider: "ups", Account: "acct-42"}
	g.Pause(ctx, ups, time.Minute) // by hand, as an operator would during an incident

	err := mux.ProcessTask(ctx, quotagate.NewTask("tracking:poll", nil, ups))
	var d *quotagate.Deferral
	fmt.Println("deferred:", errors.As(err, &d), d.Reason)
	fmt.Println(err) // what asynqmon shows as the task's last error
	fmt.Println("is failure:", quotagate.IsFailure(err))
	fmt.Println("handler calls:", calls)

	err = mux.ProcessTask(ctx, quotagate.NewTask("tracking:poll", nil, quotagate.Scope{Provider: "fedex"}))
	fmt.Println("other provider:", err, "handler calls:", calls)
	// Output:
	// deferred: true paused
	// quotagate: ups paused by an operator; back at 2025-01-02T03:05:03.000Z, no retry spent (scope ups/acct-42, background)
	// is failure: false
	// handler calls: 0
	// other provider: <nil> handler calls: 1
}
