package tracking_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate"
	"github.com/quotagate/quotagate/tracking"
)

// vault stands for wherever the application keeps its carrier credentials.
type vault map[string]string // fingerprint → credential

func (v vault) Resolve(_ context.Context, carrier, key string) (tracking.CarrierClient, error) {
	secret, ok := v[key]
	if !ok {
		return nil, errors.New("no credential for " + carrier)
	}
	return &tracking.HTTPClient{BaseURL: "https://api." + carrier + ".example", Credential: secret}, nil
}

// The wiring of a worker and of the sweep that enqueues polls: the gate's
// middleware before the handler, its RetryDelay and IsFailure in the asynq
// configuration, and one Enqueue per open shipment.
func Example() {
	redisAddr := "localhost:6379"
	secret := "sk_live_…" // from the environment or a vault, never from a task
	acme := tracking.NewCarrier("acme", secret)

	gate := quotagate.New(redis.NewClient(&redis.Options{Addr: redisAddr}), quotagate.Config{})
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: redisAddr}, asynq.Config{
		Concurrency:              20,
		IsFailure:                quotagate.IsFailure,
		RetryDelayFunc:           gate.RetryDelay(nil),
		DelayedTaskCheckInterval: 100 * time.Millisecond, // short pauses end on time
	})
	mux := asynq.NewServeMux()
	mux.Use(gate.Middleware())
	mux.Handle(tracking.TypePoll, &tracking.Handler{
		Resolver: vault{acme.Key: secret},
		Report: func(_ context.Context, p tracking.Poll, r tracking.Result) error {
			log.Printf("%s %s: %s", p.Carrier, p.Number, r.Status)
			return nil
		},
	})
	go srv.Run(mux)

	// The sweep: a poll per open shipment; one still outstanding is skipped.
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: redisAddr})
	for _, number := range []string{"1Z999AA10123456784", "1Z999AA10123456785"} {
		_, err := tracking.Enqueue(context.Background(), client, acme, number)
		if errors.Is(err, asynq.ErrTaskIDConflict) {
			continue // the previous poll of this number is still pending
		}
		if err != nil {
			log.Print(err)
		}
	}
}
