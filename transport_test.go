package quotagate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/quotagate/quotagate/internal/feed"
	"github.com/quotagate/quotagate/internal/model"
	"github.com/redis/go-redis/v9"
)

// provider is a fake provider that answers every request with status, the
// given headers and body, and counts what reached it.
type provider struct {
	srv    *httptest.Server
	hits   atomic.Int64
	status atomic.Int64
	header http.Header
	body   string
}

func newProvider(t *testing.T, status int, header http.Header, body string) *provider {
	p := &provider{header: header, body: body}
	p.status.Store(int64(status))
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.hits.Add(1)
		for k, v := range p.header {
			w.Header()[k] = v
		}
		w.WriteHeader(int(p.status.Load()))
		io.WriteString(w, p.body)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func transportGate(t *testing.T) (*Gate, *roundTrips) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	n := new(roundTrips)
	rdb.AddHook(n)
	t.Cleanup(func() { rdb.Close() })
	return New(rdb, Config{Tuning: Tuning{MaxHold: -1, OpenCache: -1}}), n // OpenCache off: count every round trip
}

// roundTrips counts the scripts a client runs, as a go-redis hook.
type roundTrips struct{ atomic.Int64 }

func (*roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts the scripts run: every store operation of an
// admission, refusal or observation is one, where the failover memory's
// probe (a PING or an identity read each second) and the subscription are
// not what a test of round trips per task counts.
func (n *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); (name == "evalsha" || name == "eval") && !feed.Owns(cmd) {
			n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (*roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func get(t *testing.T, c *http.Client, ctx context.Context, url string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c.Do(req)
}

func TestTransportRecordsRefusalAndKeepsPeersQuiet(t *testing.T) {
	g, _ := transportGate(t)
	body := `{"error":{"message":"Rate limit exceeded. Please try again in 15 seconds."}}`
	p := newProvider(t, http.StatusTooManyRequests, http.Header{"Retry-After": {"7"}}, body)
	c := &http.Client{Transport: g.Transport(nil)}
	ups := Scope{Provider: "ups", Account: Fingerprint("secret-key")}
	ctx := WithScope(context.Background(), ups)

	resp, err := get(t, c, ctx, p.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || string(got) != body {
		t.Fatalf("response changed: %d %q", resp.StatusCode, got)
	}
	rem, err := g.Remaining(context.Background(), ups)
	if err != nil || rem <= 6*time.Second || rem > 7*time.Second {
		t.Fatalf("Remaining = %v, %v; want the Retry-After of 7s (it wins over the prose)", rem, err)
	}

	// A peer of the scope: no request leaves while it is paused.
	_, err = get(t, c, ctx, p.srv.URL)
	var d *Deferral
	if !errors.As(err, &d) || d.Reason != ReasonPaused || d.Scope != ups {
		t.Fatalf("err = %v, want a *Deferral for %v", err, ups)
	}
	if n := p.hits.Load(); n != 1 {
		t.Fatalf("provider saw %d requests, want 1", n)
	}
	if strings.Contains(err.Error(), "secret-key") {
		t.Fatalf("error leaks the secret: %v", err)
	}

	// Another scope, and requests without a scope, are not gated.
	p.status.Store(http.StatusOK)
	for _, ctx := range []context.Context{WithScope(context.Background(), Scope{Provider: "fedex"}), context.Background()} {
		resp, err := get(t, c, ctx, p.srv.URL)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("ungated request: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	if n := p.hits.Load(); n != 3 {
		t.Fatalf("provider saw %d requests, want 3", n)
	}
}

func TestTransportRefusalStatuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		header http.Header
		body   string
		paused time.Duration // 0: no pause recorded
	}{
		{"429 with prose hint", 429, nil, `{"message":"try again in 3 seconds"}`, 3 * time.Second},
		{"429 without hint pauses for a hintless episode's first pause", 429, nil, `{"message":"slow down"}`, time.Second},
		{"503 with Retry-After", 503, http.Header{"Retry-After": {"4"}}, "", 4 * time.Second},
		{"503 without Retry-After is an outage, not a refusal", 503, nil, "", 0},
		{"200 is not a refusal", 200, http.Header{"Retry-After": {"4"}}, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, _ := transportGate(t)
			p := newProvider(t, tc.status, tc.header, tc.body)
			s := Scope{Provider: "p"}
			resp, err := get(t, &http.Client{Transport: g.Transport(nil)}, WithScope(context.Background(), s), p.srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			rem, _ := g.Remaining(context.Background(), s)
			if tc.paused == 0 && rem != 0 || tc.paused != 0 && (rem > tc.paused || rem <= tc.paused-time.Second) {
				t.Fatalf("Remaining = %v, want about %v", rem, tc.paused)
			}
		})
	}
}

// bodyCloser records that the transport closed a request body it did not send.
type bodyCloser struct {
	io.Reader
	closed atomic.Bool
}

func (b *bodyCloser) Close() error { b.closed.Store(true); return nil }

func TestTransportClosesBodyWhenDeferring(t *testing.T) {
	g, _ := transportGate(t)
	s := Scope{Provider: "p"}
	if _, err := g.Pause(context.Background(), s, time.Minute); err != nil {
		t.Fatal(err)
	}
	p := newProvider(t, 200, nil, "")
	b := &bodyCloser{Reader: strings.NewReader("x")}
	req, _ := http.NewRequestWithContext(WithScope(context.Background(), s), http.MethodPost, p.srv.URL, b)
	_, err := g.Transport(nil).RoundTrip(req)
	var d *Deferral
	if !errors.As(err, &d) || !b.closed.Load() || p.hits.Load() != 0 {
		t.Fatalf("err=%v closed=%v hits=%d; want a deferral, a closed body, no request", err, b.closed.Load(), p.hits.Load())
	}
}

// The first request of a task admitted by the Middleware spends that
// admission; each later request is admitted on its own (one round trip).
func TestTransportSpendsTheMiddlewareAdmission(t *testing.T) {
	g, trips := transportGate(t)
	p := newProvider(t, 200, nil, "")
	// Load the script first: go-redis falls back from EVALSHA to EVAL once.
	if _, err := model.AdmitScript.Load(context.Background(), g.store.Client()).Result(); err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: g.Transport(nil)}
	var perRequest []int
	h := g.Middleware()(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		for range 3 {
			before := int(trips.Load())
			resp, err := get(t, c, ctx, p.srv.URL)
			if err != nil {
				return err
			}
			resp.Body.Close()
			perRequest = append(perRequest, int(trips.Load())-before)
		}
		return nil
	}))
	task := NewTask("poll", nil, Scope{Provider: "p"})
	before := int(trips.Load())
	if err := h.ProcessTask(context.Background(), task); err != nil {
		t.Fatal(err)
	}
	total := int(trips.Load()) - before
	if perRequest[0] != 0 || perRequest[1] != 1 || perRequest[2] != 1 || total != 3 {
		t.Fatalf("Redis commands per request %v (total %d), want [0 1 1] and 3 in all", perRequest, total)
	}
}

// TestOneRefusalOneRecord: the quick start's way, a handler calling the
// provider through g.Transport and returning a Refusal for the 429 it got,
// records one pause and announces it once, though both the Transport and
// the Middleware see the refusal; the handler's error is returned wrapped,
// unchanged, with the deadline in force.
func TestOneRefusalOneRecord(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	logs := new(testLogBuffer)
	g := New(rdb, Config{Logger: logs.logger()})
	defer g.Close()
	ctx := context.Background()

	p := newProvider(t, http.StatusTooManyRequests, http.Header{"Retry-After": {"15"}}, `{}`)
	client := &http.Client{Transport: g.Transport(nil)}
	var returned *Refusal
	h := g.Middleware()(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		resp, err := get(t, client, ctx, p.srv.URL)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			returned = &Refusal{Hint: 15 * time.Second}
			return fmt.Errorf("poll: %w", returned)
		}
		return nil
	}))
	s := Scope{Provider: "ups", Account: "acct-1"}
	err := h.ProcessTask(ctx, NewTask("poll", nil, s))

	var rec *recorded
	if !errors.As(err, &rec) || rec.pause.Remaining <= 0 {
		t.Fatalf("err = %v, want the handler's error wrapped with the pause in force", err)
	}
	if got := (*Refusal)(nil); !errors.As(err, &got) || got != returned || *got != (Refusal{Hint: 15 * time.Second}) {
		t.Errorf("the handler's Refusal was not returned as it was: %+v", got)
	}
	if !strings.HasPrefix(err.Error(), "poll: quotagate: provider refused") {
		t.Errorf("message %q does not start with the handler's", err)
	}
	got, err := feed.Entries(ctx, rdb, "quotagate")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Key != scopeKeys("quotagate", s).Pause {
		t.Errorf("announcements for one 429: %+v, want exactly one", got)
	}
	if n := strings.Count(logs.String(), "scope paused"); n != 1 {
		t.Errorf("%d \"scope model.Paused\" log lines for one 429, want 1:\n%s", n, logs)
	}
	if n := p.hits.Load(); n != 1 {
		t.Errorf("provider hits = %d, want 1", n)
	}
}

// TestTransportLearnsTheAdvertisedBudget: the budget a provider advertises
// on its 200s is kept for the scope; once spent, the next request is
// deferred until the reset, before any refusal, and State shows it. The
// first request of the unknown scope went alone (the probe).
func TestTransportLearnsTheAdvertisedBudget(t *testing.T) {
	_, rdb := newMini(t)
	g := New(rdb, Config{})
	defer g.Close()
	remaining := atomic.Int64{}
	remaining.Store(2)
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("X-RateLimit-Limit", "2")
		w.Header().Set("X-RateLimit-Remaining", strconv.FormatInt(remaining.Add(-1), 10))
		w.Header().Set("X-RateLimit-Reset", "60")
	}))
	defer srv.Close()
	c := &http.Client{Transport: g.Transport(nil)}
	s := Scope{Provider: "gh", Account: "acct"}
	ctx := WithScope(context.Background(), s)
	for i := range 2 {
		resp, err := get(t, c, ctx, srv.URL)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		resp.Body.Close()
	}
	st, err := g.State(context.Background(), s)
	if err != nil || st.Budget == nil || st.Budget.Remaining != 0 || st.Budget.Limit != 2 || st.Budget.Reset.IsZero() {
		t.Fatalf("State = %+v (budget %+v), %v; want a spent budget of 2 with its reset", st, st.Budget, err)
	}
	_, err = get(t, c, ctx, srv.URL)
	var d *Deferral
	if !errors.As(err, &d) || d.Reason != ReasonBudget || !d.Deadline.Equal(st.Budget.Reset) {
		t.Errorf("third request: %v; want a deferral until the budget's reset %v", err, st.Budget.Reset)
	}
	if n := hits.Load(); n != 2 {
		t.Errorf("provider hits = %d, want 2: the third waits for the reset", n)
	}
}

// TestTransportResetsInMilliseconds: a provider that writes its resets in
// milliseconds under X-RateLimit-Reset writes numbers of at most an hour in
// every window's last 3.6 s. Its first reading (19987, above an hour of
// "seconds") tells the unit, so a refusal 18 s later whose reset is "1947"
// pauses the scope until the window's end, not for 32 minutes.
func TestTransportResetsInMilliseconds(t *testing.T) {
	clock, rdb := newMini(t)
	g := New(rdb, Config{Tuning: Tuning{MaxHold: -1, OpenCache: -1}})
	defer g.Close()
	var status, remaining, reset atomic.Int64
	status.Store(http.StatusOK)
	remaining.Store(9)
	reset.Store(19987)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-RateLimit-Limit", "10")
		w.Header().Set("X-RateLimit-Remaining", strconv.FormatInt(remaining.Load(), 10))
		w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(reset.Load(), 10))
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()
	c := &http.Client{Transport: g.Transport(nil)}
	s := Scope{Provider: "ms", Account: "acct"}
	ctx := WithScope(context.Background(), s)
	resp, err := get(t, c, ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	clock.Advance(18 * time.Second)
	status.Store(http.StatusTooManyRequests)
	remaining.Store(0)
	reset.Store(1947)
	if resp, err = get(t, c, ctx, srv.URL); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	st, err := g.State(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if st.Until.IsZero() || st.Remaining > 3*time.Second {
		t.Errorf("after the refusal: paused %v (until %v, %v); want until the window's end, 1.947 s", st.Remaining, st.Until, st.Reason)
	}
	if st.Budget == nil || st.Budget.Reset.Sub(clock.Now) > 3*time.Second {
		t.Errorf("the budget's reset: %+v; want the window's end, 1.947 s ahead", st.Budget)
	}
}

// TestProbeAfterVerdict: a first contact that is not admitted is no probe:
// it marks nothing, so its peers do not wait for an answer that never
// comes. (Before, the probe was marked before the verdict.)
func TestProbeAfterVerdict(t *testing.T) {
	c, rdb := newMini(t)
	s := Scope{Provider: "acme", Account: "a"}
	g := New(rdb, Config{Prefix: "qgtest"})
	defer g.Close()
	g.Transport(nil) // responses are observed: first contacts probe
	ctx := context.Background()
	if _, err := g.Pause(ctx, s, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := g.admit(ctx, s, 1, false); err == nil {
		t.Fatal("admitted while paused")
	}
	if c.MR.Exists(scopeKeys("qgtest", s).Budget) {
		t.Error("a deferred first contact marked a probe")
	}
}

// TestSilentNotesPruned: the gate's notes of scopes whose provider
// advertises nothing are pruned of the old ones (accounts are unbounded).
func TestSilentNotesPruned(t *testing.T) {
	_, rdb := newMini(t)
	now := t0
	g := newWith(rdb, Config{Prefix: "qgtest"}, hooks{now: func() time.Time { return now }})
	defer g.Close()
	for i := range silentPrune - 1 {
		g.rememberSilent(string(rune(i)))
	}
	now = now.Add(silentFor)
	g.rememberSilent("last") // the silentPrune-th note prunes
	n := 0
	g.silent.Range(func(any, any) bool { n++; return true })
	if n != 1 {
		t.Errorf("%d notes kept, want only the fresh one", n)
	}
}

// scriptOrder records, as a go-redis hook, the names of the model's
// scripts a client runs, in order (named by names, from their hashes).
type scriptOrder struct {
	names map[string]string
	mu    sync.Mutex
	ran   []string
}

func (*scriptOrder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (o *scriptOrder) note(cmd redis.Cmder) {
	if args := cmd.Args(); len(args) > 1 && (cmd.Name() == "evalsha" || cmd.Name() == "eval") {
		if sha, ok := args[1].(string); ok && o.names[sha] != "" {
			o.mu.Lock()
			o.ran = append(o.ran, o.names[sha])
			o.mu.Unlock()
		}
	}
}

func (o *scriptOrder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { o.note(cmd); return next(ctx, cmd) }
}

func (o *scriptOrder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			o.note(cmd)
		}
		return next(ctx, cmds)
	}
}

// TestTransportReleasesARefusedSlotAfterItsRefusal: a refused request's
// slot in flight is freed once its refusal is recorded, an accepted one's
// at once. Freed before its refusal, the slot would let another request
// be admitted first, which the refusal counts as in flight with it: a
// window's refusal of a request alone would be read as a concurrency
// limit's.
func TestTransportReleasesARefusedSlotAfterItsRefusal(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	o := &scriptOrder{names: map[string]string{model.RefuseScript.Hash(): "refuse", model.ReleaseScript.Hash(): "release",
		model.AdmitScript.Hash(): "admit"}}
	rdb.AddHook(o)
	g := New(rdb, Config{Limits: map[string][]Limit{"acme": {Concurrent(1)}}, Tuning: Tuning{MaxHold: -1, OpenCache: -1}})
	defer g.Close()
	p := newProvider(t, http.StatusOK, http.Header{"Retry-After": {"1"}}, "")
	c := &http.Client{Transport: g.Transport(nil)}
	ctx := WithScope(context.Background(), Scope{Provider: "acme", Account: "a"})
	for _, tc := range []struct {
		status int
		want   []string
	}{
		{http.StatusOK, []string{"admit", "release"}},
		{http.StatusTooManyRequests, []string{"admit", "refuse", "release"}},
	} {
		o.mu.Lock()
		o.ran = nil
		o.mu.Unlock()
		p.status.Store(int64(tc.status))
		resp, err := get(t, c, ctx, p.srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		o.mu.Lock()
		got := slices.Clone(o.ran)
		o.mu.Unlock()
		if !slices.Equal(got, tc.want) {
			t.Errorf("answered %d: the scripts ran %v, want %v", tc.status, got, tc.want)
		}
	}
}
