package tracking_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"path"
	"slices"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate"
	"github.com/quotagate/quotagate/tracking"
)

// vault stands for wherever the application keeps its carrier credentials.
type vault struct {
	baseURL string
	secrets map[string]string // fingerprint → credential
}

func (v vault) Resolve(_ context.Context, carrier, key string) (tracking.CarrierClient, error) {
	secret, ok := v.secrets[key]
	if !ok {
		return nil, errors.New("no credential for " + carrier)
	}
	return &tracking.HTTPClient{BaseURL: v.baseURL, Credential: secret}, nil
}

// The wiring of a worker and of the sweep that enqueues polls: the gate's
// middleware before the handler, its RetryDelay and IsFailure in the asynq
// configuration, and one Enqueue per open shipment; a number whose poll is
// still outstanding is skipped.
func Example() {
	// Stand-ins for the carrier's API and for Redis; in production,
	// BaseURL is the carrier's and redisAddr your Redis ("localhost:6379").
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status := map[string]string{"1Z999AA10123456784": "in_transit", "1Z999AA10123456785": "delivered"}
		fmt.Fprintf(w, `{"status": %q}`, status[path.Base(r.URL.Path)])
	}))
	defer api.Close()
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	redisAddr := mr.Addr()

	secret := "sk_live_…" // from the environment or a vault, never from a task
	acme := tracking.NewCarrier("acme", secret)

	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	gate := quotagate.New(rdb, quotagate.Config{})
	defer gate.Close()

	// The sweep: a poll per open shipment (here one number twice).
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: redisAddr})
	defer client.Close()
	for _, number := range []string{"1Z999AA10123456784", "1Z999AA10123456785", "1Z999AA10123456784"} {
		_, err := tracking.Enqueue(context.Background(), client, acme, number)
		if errors.Is(err, asynq.ErrTaskIDConflict) {
			fmt.Println("skipped", number+": its poll is still outstanding")
			continue
		}
		if err != nil {
			log.Fatal(err)
		}
	}

	// The workers.
	reported := make(chan string)
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: redisAddr}, asynq.Config{
		Concurrency:              20,
		IsFailure:                quotagate.IsFailure,
		RetryDelayFunc:           gate.RetryDelay(nil),
		DelayedTaskCheckInterval: 100 * time.Millisecond, // short pauses end on time
		LogLevel:                 asynq.WarnLevel,
	})
	mux := asynq.NewServeMux()
	mux.Use(gate.Middleware())
	mux.Handle(tracking.TypePoll, &tracking.Handler{
		Resolver: vault{baseURL: api.URL, secrets: map[string]string{acme.Key: secret}},
		Report: func(_ context.Context, p tracking.Poll, r tracking.Result) error {
			reported <- fmt.Sprintf("%s %s: %s", p.Carrier, p.Number, r.Status)
			return nil
		},
	})
	if err := srv.Start(mux); err != nil {
		log.Fatal(err)
	}
	defer srv.Shutdown()

	got := []string{<-reported, <-reported}
	slices.Sort(got) // the workers answer in any order
	for _, line := range got {
		fmt.Println(line)
	}
	// Output:
	// skipped 1Z999AA10123456784: its poll is still outstanding
	// acme 1Z999AA10123456784: in_transit
	// acme 1Z999AA10123456785: delivered
}
