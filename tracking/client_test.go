package tracking_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/quotagate/quotagate"
	"github.com/quotagate/quotagate/tracking"
)

func TestHTTPClient(t *testing.T) {
	a, srv := newAPI(t)
	c := &tracking.HTTPClient{BaseURL: srv.URL, Credential: acmeSecret}
	ctx := context.Background()

	r, err := c.Track(ctx, "1Z999AA10123456784")
	if err != nil || r.Status != tracking.StatusDelivered || r.Number != "1Z999AA10123456784" || !r.Status.Final() {
		t.Fatalf("Track = %+v, %v; want delivered", r, err)
	}

	_, err = c.Track(ctx, "UNKNOWN")
	if !errors.Is(err, tracking.ErrUnknownNumber) {
		t.Fatalf("unknown number: err = %v, want ErrUnknownNumber", err)
	}

	a.setRefuse(acmeSecret, true)
	_, err = c.Track(ctx, "1Z999AA10123456784")
	var ref *quotagate.Refusal
	if !errors.As(err, &ref) {
		t.Fatalf("429: err = %v, want a *quotagate.Refusal", err)
	}
	if ref.Hint != 15*time.Second {
		t.Fatalf("429: hint %v, want 15s read from the JSON prose", ref.Hint)
	}
	var apiErr *tracking.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != "rate_limited" {
		t.Fatalf("429: carrier error %+v, want HTTP 429 rate_limited", apiErr)
	}

	for _, s := range []string{err.Error(), fmt.Sprint(c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c)} {
		if strings.Contains(s, acmeSecret) {
			t.Fatalf("credential leaked into %q", s)
		}
	}
}

func TestHTTPClientNoHint(t *testing.T) {
	srv := newServer(t, 429, `{"error":{"code":"rate_limited","message":"Too many requests, try again later."}}`)
	_, err := (&tracking.HTTPClient{BaseURL: srv}).Track(context.Background(), "N1")
	var ref *quotagate.Refusal
	if !errors.As(err, &ref) || ref.Hint != 0 {
		t.Fatalf("429 without a hint: err = %v, want a Refusal with Hint 0 (the gate's fallback applies)", err)
	}
	srv = newServer(t, 500, `oops`)
	_, err = (&tracking.HTTPClient{BaseURL: srv}).Track(context.Background(), "N1")
	if errors.As(err, &ref) {
		t.Fatalf("HTTP 500 is not a refusal: %v", err)
	}
}

func TestCarrier(t *testing.T) {
	if s := acme.Scope(); s.Provider != "acme" || s.Account != quotagate.Fingerprint(acmeSecret) {
		t.Fatalf("acme scope = %v, want the credential's fingerprint", s)
	}
	// Two credentials of one account share the account's quota.
	k1 := tracking.Carrier{Name: "ship", Key: quotagate.Fingerprint("k1"), Account: "acct-42"}
	k2 := tracking.Carrier{Name: "ship", Key: quotagate.Fingerprint("k2"), Account: "acct-42"}
	if k1.Scope() != k2.Scope() {
		t.Fatalf("scopes of one account differ: %v, %v", k1.Scope(), k2.Scope())
	}

	bad := tracking.Carrier{Name: "acme", Key: acmeSecret} // a raw credential
	err := bad.Validate()
	if !errors.Is(err, tracking.ErrInvalid) || strings.Contains(err.Error(), acmeSecret) {
		t.Fatalf("raw credential as key: err = %v, want ErrInvalid without the secret", err)
	}
	if _, err := tracking.NewPollTask(bad, "N1"); err == nil {
		t.Fatal("NewPollTask accepted a raw credential")
	}
	for _, c := range []tracking.Carrier{{Name: "", Key: acme.Key}, {Name: "a:b", Key: acme.Key}} {
		if c.Validate() == nil {
			t.Errorf("carrier %q accepted", c.Name)
		}
	}
	for _, n := range []string{"", "a b", "x:y", strings.Repeat("9", 65)} {
		if _, err := tracking.NewPollTask(acme, n); !errors.Is(err, tracking.ErrInvalid) {
			t.Errorf("number %q: err = %v, want ErrInvalid", n, err)
		}
	}
}

func TestNewPollTask(t *testing.T) {
	task, err := tracking.NewPollTask(acme, "N1", asynq.TaskID("other"), asynq.MaxRetry(3))
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := quotagate.ScopeOf(task); !ok || s != acme.Scope() {
		t.Fatalf("task scope = %v, %v; want %v", s, ok, acme.Scope())
	}
	p, err := tracking.ParsePoll(task)
	if err != nil || p.Number != "N1" || p.CarrierAccount() != acme {
		t.Fatalf("payload = %+v, %v", p, err)
	}
	if strings.Contains(string(task.Payload()), acmeSecret) {
		t.Fatal("payload carries the credential")
	}
	if _, err := tracking.ParsePoll(asynq.NewTask(tracking.TypePoll, []byte("{"))); !errors.Is(err, asynq.SkipRetry) {
		t.Fatalf("malformed payload: err = %v, want SkipRetry", err)
	}
}

func TestHandlerErrors(t *testing.T) {
	a, srv := newAPI(t)
	h := &tracking.Handler{Resolver: newResolver(srv.URL)}
	ctx := context.Background()

	unknown, _ := tracking.NewPollTask(acme, "UNKNOWN")
	if err := h.ProcessTask(ctx, unknown); !errors.Is(err, asynq.SkipRetry) || !errors.Is(err, tracking.ErrUnknownNumber) {
		t.Fatalf("unknown number: err = %v, want ErrUnknownNumber and SkipRetry", err)
	}

	a.setRefuse(acmeSecret, true)
	task, _ := tracking.NewPollTask(acme, "N1")
	err := h.ProcessTask(ctx, task)
	var ref *quotagate.Refusal
	if !errors.As(err, &ref) || ref.Hint != 15*time.Second {
		t.Fatalf("refused poll: err = %v, want a wrapped Refusal with the 15 s hint", err)
	}
	if errors.Is(err, asynq.SkipRetry) || !quotagate.IsFailure(err) {
		t.Fatalf("refused poll must be retried as a failure: %v", err)
	}
}

func newServer(t *testing.T, status int, body string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}
