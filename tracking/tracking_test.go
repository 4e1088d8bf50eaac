package tracking_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/tracking"
)

func TestMain(m *testing.M) { redistest.Main(m, redistest.NoLeaks()) }

// Two carriers, each polled with one credential. The secrets appear only
// here, in the fake API and in the resolver.
const (
	acmeSecret = "acme-live-sk-0123456789abcdef"
	betaSecret = "beta-live-sk-fedcba9876543210"
)

var (
	acme = tracking.NewCarrier("acme", acmeSecret)
	beta = tracking.NewCarrier("beta", betaSecret)
)

// refusalBody is what the carrier answers with HTTP 429: the retry hint only
// in the prose of a JSON field, as in the article.
const refusalBody = `{"error":{"code":"rate_limited","message":"Rate limit exceeded. Please try again in 15 seconds."}}`

// api is a fake carrier API shared by both carriers: it refuses every
// request signed with a credential in refuse, and reports every other
// shipment delivered.
type api struct {
	mu       sync.Mutex
	refuse   map[string]bool
	requests map[string]int // by credential
}

func newAPI(t *testing.T) (*api, *httptest.Server) {
	a := &api{refuse: map[string]bool{}, requests: map[string]int{}}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	return a, srv
}

func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cred := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	number := strings.TrimPrefix(r.URL.Path, "/v1/shipments/")
	a.mu.Lock()
	a.requests[cred]++
	refuse := a.refuse[cred]
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case refuse:
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, refusalBody)
	case number == "UNKNOWN":
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error":{"code":"not_found","message":"No shipment with this number."}}`)
	default:
		fmt.Fprintf(w, `{"number":%q,"status":"delivered","updated_at":"2026-01-02T03:04:05Z"}`, number)
	}
}

func (a *api) setRefuse(cred string, on bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refuse[cred] = on
}

func (a *api) count(cred string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.requests[cred]
}

// resolver maps credential fingerprints to HTTP clients of the fake API and
// counts resolutions per carrier.
type resolver struct {
	base    string
	secrets map[string]string // fingerprint → credential

	mu    sync.Mutex
	calls map[string]int
}

func newResolver(base string) *resolver {
	return &resolver{
		base:    base,
		secrets: map[string]string{acme.Key: acmeSecret, beta.Key: betaSecret},
		calls:   map[string]int{},
	}
}

func (r *resolver) Resolve(_ context.Context, carrier, key string) (tracking.CarrierClient, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[carrier]++
	secret, ok := r.secrets[key]
	if !ok {
		return nil, fmt.Errorf("no credential for %s key %s", carrier, key)
	}
	return &tracking.HTTPClient{BaseURL: r.base, Credential: secret}, nil
}

func (r *resolver) count(carrier string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[carrier]
}

// reports collects the results the handler reports.
type reports struct {
	mu sync.Mutex
	by map[string]tracking.Result // by task ID
}

func (rs *reports) report(_ context.Context, p tracking.Poll, r tracking.Result) error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.by == nil {
		rs.by = map[string]tracking.Result{}
	}
	rs.by[tracking.TaskID(p.Carrier, p.Number)] = r
	return nil
}

func (rs *reports) get(id string) (tracking.Result, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r, ok := rs.by[id]
	return r, ok
}

// eachRedis runs f against a real redis-server (skipped when absent) and
// against miniredis. prefix isolates the test's gate keys and asynq queue.
func eachRedis(t *testing.T, f func(t *testing.T, addr, prefix string)) {
	t.Run("redis-server", func(t *testing.T) {
		srv := redistest.Start(t)
		f(t, srv.Addr, srv.Prefix(t))
	})
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		f(t, m.Addr(), "qgtest")
	})
}

// fixture is one worker fleet: a gate, an asynq client, inspector and
// server on one queue, the fake API and the counting resolver.
type fixture struct {
	gate     *quotagate.Gate
	queue    string
	client   *asynq.Client
	insp     *asynq.Inspector
	api      *api
	resolver *resolver
	reports  *reports
}

func newFixture(t *testing.T, addr, prefix string) *fixture {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	opt := asynq.RedisClientOpt{Addr: addr}
	f := &fixture{
		gate:    quotagate.New(rdb, quotagate.Config{Prefix: prefix, Logger: slog.New(slog.DiscardHandler)}),
		queue:   "q:" + prefix,
		client:  asynq.NewClient(opt),
		insp:    asynq.NewInspector(opt),
		reports: &reports{},
	}
	t.Cleanup(func() { f.client.Close(); f.insp.Close() })
	var srv *httptest.Server
	f.api, srv = newAPI(t)
	f.resolver = newResolver(srv.URL)
	return f
}

// start runs an asynq server with the gate on the fixture's queue until the
// test ends.
func (f *fixture) start(t *testing.T, addr string) {
	t.Helper()
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: addr}, asynq.Config{
		Concurrency:              4,
		Queues:                   map[string]int{f.queue: 1},
		TaskCheckInterval:        50 * time.Millisecond,
		DelayedTaskCheckInterval: 100 * time.Millisecond,
		IsFailure:                quotagate.IsFailure,
		RetryDelayFunc:           f.gate.RetryDelay(nil),
		Logger:                   quietLogger{},
		LogLevel:                 asynq.FatalLevel,
	})
	mux := asynq.NewServeMux()
	mux.Use(f.gate.Middleware())
	mux.Handle(tracking.TypePoll, &tracking.Handler{Resolver: f.resolver, Report: f.reports.report})
	if err := srv.Start(mux); err != nil {
		t.Fatalf("start asynq server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
}

func (f *fixture) enqueue(t *testing.T, c tracking.Carrier, number string) {
	t.Helper()
	if _, err := tracking.Enqueue(context.Background(), f.client, c, number, asynq.Queue(f.queue)); err != nil {
		t.Fatalf("enqueue %s %s: %v", c.Name, number, err)
	}
}

// waitState waits until the task is in state and returns its info.
func (f *fixture) waitState(t *testing.T, id string, state asynq.TaskState) *asynq.TaskInfo {
	t.Helper()
	var info *asynq.TaskInfo
	var err error
	waitFor(t, fmt.Sprintf("task %s in state %v", id, state), func() bool {
		info, err = f.insp.GetTaskInfo(f.queue, id)
		return err == nil && info.State == state
	})
	return info
}

// waitFor polls cond until it holds; the bound only catches a hang.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type quietLogger struct{}

func (quietLogger) Debug(...any) {}
func (quietLogger) Info(...any)  {}
func (quietLogger) Warn(...any)  {}
func (quietLogger) Error(...any) {}
func (quietLogger) Fatal(...any) {}

func TestEnqueueRejectsDuplicateWhilePending(t *testing.T) {
	eachRedis(t, func(t *testing.T, addr, prefix string) {
		f := newFixture(t, addr, prefix) // no server: tasks stay pending
		ctx := context.Background()
		f.enqueue(t, acme, "1Z999AA10123456784")

		_, err := tracking.Enqueue(ctx, f.client, acme, "1Z999AA10123456784", asynq.Queue(f.queue))
		if !errors.Is(err, asynq.ErrTaskIDConflict) {
			t.Fatalf("second enqueue of a pending number: err = %v, want ErrTaskIDConflict", err)
		}
		if strings.Contains(err.Error(), acmeSecret) {
			t.Fatalf("error quotes the credential: %v", err)
		}

		// Uniqueness is per number and carrier, not per quota scope.
		f.enqueue(t, acme, "1Z999AA10123456785")
		f.enqueue(t, beta, "1Z999AA10123456784")

		info, err := f.insp.GetTaskInfo(f.queue, tracking.TaskID("acme", "1Z999AA10123456784"))
		if err != nil {
			t.Fatal(err)
		}
		if info.State != asynq.TaskStatePending {
			t.Fatalf("state = %v, want pending", info.State)
		}
		assertNoSecret(t, info)
	})
}

func TestNumbersOfOneCarrierShareOnePause(t *testing.T) {
	eachRedis(t, func(t *testing.T, addr, prefix string) {
		f := newFixture(t, addr, prefix)
		f.api.setRefuse(acmeSecret, true)
		f.start(t, addr)

		// The first number of acme is refused: "try again in 15 seconds".
		f.enqueue(t, acme, "ACME0001")
		refused := f.waitState(t, tracking.TaskID("acme", "ACME0001"), asynq.TaskStateRetry)
		if refused.Retried != 1 || !strings.Contains(refused.LastErr, "rate_limited") {
			t.Fatalf("refused task: retried %d, last error %q; want 1 and the carrier's refusal", refused.Retried, refused.LastErr)
		}
		// PollError reads the Refusal's message after the middleware
		// completed it with the shared deadline.
		if !strings.Contains(refused.LastErr, "paused until") {
			t.Fatalf("refused task: last error %q lacks the shared deadline", refused.LastErr)
		}
		rem, err := f.gate.Remaining(context.Background(), acme.Scope())
		if err != nil {
			t.Fatal(err)
		}
		if rem <= 5*time.Second || rem > 15*time.Second {
			t.Fatalf("acme's pause: %v remaining, want the 15 s hint of the refusal", rem)
		}

		// Another number of acme waits for the same pause; beta goes on.
		f.enqueue(t, acme, "ACME0002")
		f.enqueue(t, beta, "BETA0001")
		deferred := f.waitState(t, tracking.TaskID("acme", "ACME0002"), asynq.TaskStateRetry)
		waitFor(t, "beta's poll reported", func() bool {
			_, ok := f.reports.get(tracking.TaskID("beta", "BETA0001"))
			return ok
		})

		if deferred.Retried != 0 || !strings.Contains(deferred.LastErr, "paused") {
			t.Fatalf("deferred task: retried %d, last error %q; want 0 and a deferral", deferred.Retried, deferred.LastErr)
		}
		if got := f.resolver.count("acme"); got != 1 {
			t.Fatalf("acme clients resolved: %d, want 1 (the refused poll only)", got)
		}
		if got := f.api.count(acmeSecret); got != 1 {
			t.Fatalf("requests sent to acme: %d, want 1", got)
		}
		if got := f.resolver.count("beta"); got != 1 {
			t.Fatalf("beta clients resolved: %d, want 1", got)
		}
		if rem, _ := f.gate.Remaining(context.Background(), beta.Scope()); rem != 0 {
			t.Fatalf("beta paused for %v by acme's refusal", rem)
		}
		assertNoSecret(t, refused)
		assertNoSecret(t, deferred)
	})
}

func TestDeferredTaskNeverResolvesClient(t *testing.T) {
	eachRedis(t, func(t *testing.T, addr, prefix string) {
		f := newFixture(t, addr, prefix)
		f.start(t, addr)
		if _, err := f.gate.Pause(context.Background(), acme.Scope(), 9*time.Second); err != nil {
			t.Fatal(err)
		}

		f.enqueue(t, acme, "ACME0003")
		info := f.waitState(t, tracking.TaskID("acme", "ACME0003"), asynq.TaskStateRetry)

		if info.Retried != 0 {
			t.Fatalf("deferred task retried %d, want 0: a deferral spends no retry", info.Retried)
		}
		if !strings.Contains(info.LastErr, "paused") {
			t.Fatalf("last error %q, want the gate's deferral", info.LastErr)
		}
		if got := f.resolver.count("acme"); got != 0 {
			t.Fatalf("clients resolved while paused: %d, want 0", got)
		}
		if got := f.api.count(acmeSecret); got != 0 {
			t.Fatalf("requests sent while paused: %d, want 0", got)
		}
		if wait := time.Until(info.NextProcessAt); wait < 5*time.Second {
			t.Fatalf("deferred task comes back in %v, want after the 9 s pause", wait)
		}
	})
}

// assertNoSecret checks that no credential reached the task as asynq keeps it.
func assertNoSecret(t *testing.T, info *asynq.TaskInfo) {
	t.Helper()
	all := string(info.Payload) + info.LastErr + info.ID + fmt.Sprint(info.Headers)
	for _, s := range []string{acmeSecret, betaSecret} {
		if strings.Contains(all, s) {
			t.Fatalf("task %s carries a credential", info.ID)
		}
	}
}
