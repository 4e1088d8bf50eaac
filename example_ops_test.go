package quotagate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotagate/quotagate"
)

// Pauses lists every scope paused now, as an operator asks during an
// incident; the JSON is what the quotagate command and the inspect page
// print with -json or ?format=json.
func ExampleGate_Pauses() {
	rdb, done := exampleRedis()
	defer done()
	g := quotagate.New(rdb, quotagate.Config{})
	ctx := context.Background()
	g.Pause(ctx, quotagate.Scope{Provider: "ups", Account: "acct-42"}, 15*time.Second)
	g.Pause(ctx, quotagate.Scope{Provider: "fedex", Account: "a:{1}"}, time.Minute)

	ps, err := g.Pauses(ctx)
	if err != nil {
		panic(err)
	}
	for _, p := range ps {
		fmt.Println(p)
	}
	json.NewEncoder(os.Stdout).Encode(ps[0])
	// Output:
	// fedex/a:{1} paused for 1m0s (until 2025-01-02T03:05:05.000Z)
	// ups/acct-42 paused for 15s (until 2025-01-02T03:04:20.000Z)
	// {"provider":"fedex","account":"a:{1}","paused":true,"until":"2025-01-02T03:05:05.000Z","remaining_seconds":60,"limit_backlog_seconds":0}
}

// Collector hands the gate's metrics to a registry of the caller's; the
// gate never touches the global one.
func ExampleGate_Collector() {
	rdb, done := exampleRedis()
	defer done()
	g := quotagate.New(rdb, quotagate.Config{})
	g.Pause(context.Background(), quotagate.Scope{Provider: "ups", Account: "acct-42"}, 15*time.Second)

	reg := prometheus.NewRegistry()
	reg.MustRegister(g.Collector())
	// Serve it with promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "quotagate_paused_scopes" {
			for _, m := range mf.GetMetric() {
				fmt.Println(mf.GetName(), m.GetLabel()[0].GetValue(), m.GetGauge().GetValue())
			}
		}
	}
	// Output:
	// quotagate_paused_scopes ups 1
}
