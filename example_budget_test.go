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
