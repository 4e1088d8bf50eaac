package quotagate_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/quotagate/quotagate"
)

// Interactive work finds the reserve: once a person's poll has asked,
// background work of the same scope leaves a fifth of its window (2 of
// 10) unspent, and the person's next polls are admitted while the sweep
// waits for the next window.
func ExampleClass() {
	rdb, done := exampleRedis()
	defer done()
	g := quotagate.New(rdb, quotagate.Config{Limits: map[string][]quotagate.Limit{"ups": {quotagate.FixedWindow(10, time.Minute)}}})
	defer g.Close()
	carrier := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer carrier.Close()
	client := &http.Client{Transport: g.Transport(nil)}
	scope := quotagate.WithScope(context.Background(), quotagate.Scope{Provider: "ups", Account: "acct-42"})

	poll := func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, "GET", carrier.URL, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	person := quotagate.WithClass(scope, quotagate.Interactive)
	fmt.Println("person:", poll(person) == nil)
	sweep := 0
	for sweep < 20 && poll(scope) == nil { // bounded: a store that fails opens the gate
		sweep++
	}
	fmt.Println("sweep got", sweep, "of the window's 9 left")
	fmt.Println("person:", poll(person) == nil, poll(person) == nil)
	var d *quotagate.Deferral
	fmt.Println("person, the window spent:", errors.As(poll(person), &d), d.Class)
	// Output:
	// person: true
	// sweep got 7 of the window's 9 left
	// person: true true
	// person, the window spent: true interactive
}
