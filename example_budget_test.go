package quotagate_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/hibiken/asynq"

	"github.com/quotagate/quotagate"
)

// A handler with its own HTTP client reports each response with Observe:
// the budget the provider advertises becomes the scope's, shared by every
// worker. Spent, it holds the scope until its reset, before any 429.
func ExampleGate_Observe() {
	rdb, done := exampleRedis()
	defer done()
	g := quotagate.New(rdb, quotagate.Config{})
	defer g.Close()
	ctx := context.Background()
	gh := quotagate.Scope{Provider: "github", Account: "acct-7"}

	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{
		"X-Ratelimit-Limit":     {"5000"},
		"X-Ratelimit-Remaining": {"0"},
		"X-Ratelimit-Reset":     {"30"}, // seconds from now
	}}
	if err := g.Observe(ctx, gh, resp); err != nil {
		fmt.Println(err)
	}
	st, _ := g.State(ctx, gh)
	fmt.Println("left:", st.Budget.Remaining, "of", st.Budget.Limit)

	mux := asynq.NewServeMux()
	mux.Use(g.Middleware())
	mux.HandleFunc("sync", func(context.Context, *asynq.Task) error { return nil })
	err := mux.ProcessTask(ctx, quotagate.NewTask("sync", nil, gh))
	var d *quotagate.Deferral
	fmt.Println("deferred:", errors.As(err, &d), "until the reset:", d.Deadline.Equal(st.Budget.Reset))
	// Output:
	// left: 0 of 5000
	// deferred: true until the reset: true
}

// Several limits on one scope are checked and spent together: a provider
// that grants 10 requests a second and 50,000 a day, counted in daily
// windows it resets itself.
func ExampleFixedWindow() {
	cfg := quotagate.Config{Limits: map[string][]quotagate.Limit{
		"acme": {quotagate.PerSecond(10, 10), quotagate.FixedWindow(50000, 24*time.Hour)},
	}}
	for _, l := range cfg.Limits["acme"] {
		fmt.Println(l)
	}
	// Output:
	// 10/s burst 10
	// 50000 per 24h0m0s window
}

// A provider that logs its requests ("3 in any 10 seconds") spends its
// quota at once after an idle spell, and then each slot again as it comes
// back, a window after it was spent: the fourth task waits for the first
// one's slot. A sliding window counter of go-chi/httprate is stated with
// SlidingCounterWindow, the pace it never refuses.
func ExampleSlidingWindow() {
	rdb, done := exampleRedis()
	defer done()
	g := quotagate.New(rdb, quotagate.Config{Limits: map[string][]quotagate.Limit{
		"acme": {quotagate.SlidingWindow(3, 10*time.Second)},
	}})
	defer g.Close()
	ctx := context.Background()
	acme := quotagate.Scope{Provider: "acme", Account: "acct-7"}

	mux := asynq.NewServeMux()
	mux.Use(g.Middleware())
	mux.HandleFunc("sync", func(context.Context, *asynq.Task) error { return nil })
	for i := 1; i <= 4; i++ {
		err := mux.ProcessTask(ctx, quotagate.NewTask("sync", nil, acme))
		var d *quotagate.Deferral
		if errors.As(err, &d) {
			fmt.Printf("task %d deferred, limited: %v\n", i, d.Reason == quotagate.ReasonLimited)
			continue
		}
		fmt.Printf("task %d ran: %v\n", i, err)
	}
	st, _ := g.State(ctx, acme)
	fmt.Println("the log empties in about", st.LimitBacklog.Round(time.Second))
	fmt.Println(quotagate.SlidingWindow(3, 10*time.Second), "|", quotagate.SlidingCounterWindow(100, time.Minute))
	// Output:
	// task 1 ran: <nil>
	// task 2 ran: <nil>
	// task 3 ran: <nil>
	// task 4 deferred, limited: true
	// the log empties in about 10s
	// 3 in any 10s | 99/min burst 1
}

// A provider that allows a number of requests in flight at once per key
// is configured with Concurrent: each admitted task holds a lease until
// its handler returns (or, through the Transport, until its response
// arrives). Here task 1's handler runs task 2, whose handler runs task 3,
// while 2 slots are taken: task 3 waits for one (Tuning.MaxHold, shortened
// here) and is deferred. Once the others returned, task 4 runs at once.
func ExampleConcurrent() {
	rdb, done := exampleRedis()
	defer done()
	g := quotagate.New(rdb, quotagate.Config{
		Limits: map[string][]quotagate.Limit{"acme": {quotagate.Concurrent(2)}},
		Tuning: quotagate.Tuning{MaxHold: 100 * time.Millisecond},
	})
	defer g.Close()
	ctx := context.Background()
	acme := quotagate.Scope{Provider: "acme", Account: "acct-7"}

	mux := asynq.NewServeMux()
	mux.Use(g.Middleware())
	report := func(i int, err error) {
		var d *quotagate.Deferral
		if errors.As(err, &d) {
			fmt.Printf("task %d deferred, in flight: %v\n", i, d.Reason == quotagate.ReasonInFlight)
			return
		}
		fmt.Printf("task %d ran: %v\n", i, err)
	}
	mux.HandleFunc("sync", func(ctx context.Context, t *asynq.Task) error {
		if i := int(t.Payload()[0]); i < 3 { // while this one is in flight, the next asks
			report(i+1, mux.ProcessTask(ctx, quotagate.NewTask("sync", []byte{byte(i + 1)}, acme)))
		}
		return nil
	})
	report(1, mux.ProcessTask(ctx, quotagate.NewTask("sync", []byte{1}, acme)))
	report(4, mux.ProcessTask(ctx, quotagate.NewTask("sync", []byte{4}, acme)))
	fmt.Println(quotagate.Concurrent(2))
	// Output:
	// task 3 deferred, in flight: true
	// task 2 ran: <nil>
	// task 1 ran: <nil>
	// task 4 ran: <nil>
	// 2 in flight
}
