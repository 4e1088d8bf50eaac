package tracking

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/quotagate/quotagate"
	"github.com/quotagate/quotagate/hint"
)

// Status is a shipment's state as the carrier reports it.
type Status string

// The statuses a carrier reports.
const (
	StatusInTransit Status = "in_transit"
	StatusDelivered Status = "delivered"
	StatusException Status = "exception" // held, damaged, returned: a human follows up
)

// Final reports whether no later poll can change s.
func (s Status) Final() bool { return s == StatusDelivered }

// Result is the answer to one poll.
type Result struct {
	Number    string    `json:"number"`
	Status    Status    `json:"status"`
	UpdatedAt time.Time `json:"updated_at"`
}

// CarrierClient polls one carrier with one credential.
//
// Track returns the shipment's status. When the carrier refuses the request
// for its quota, the error is (or wraps) a *quotagate.Refusal carrying the
// carrier's retry hint; for an unknown number it wraps ErrUnknownNumber.
type CarrierClient interface {
	Track(ctx context.Context, number string) (Result, error)
}

// ClientResolver returns the client for a carrier and a credential, named by
// its fingerprint (Carrier.Key): the place where the secret is looked up,
// connections are set up or requests are signed. Handler resolves a client
// only after the gate admitted the task, so a deferred task costs none of
// that work.
type ClientResolver interface {
	Resolve(ctx context.Context, carrier, key string) (CarrierClient, error)
}

// ErrUnknownNumber is wrapped by Track errors for a number the carrier does
// not know (HTTP 404).
var ErrUnknownNumber = errors.New("tracking: unknown tracking number")

// APIError is a carrier's error answer other than a success.
type APIError struct {
	StatusCode int    // HTTP status
	Code       string // the carrier's error code, e.g. "rate_limited"
	Message    string // the carrier's message, e.g. "Rate limit exceeded. Please try again in 15 seconds."
}

// Error returns the status, code and message of the carrier's answer.
func (e *APIError) Error() string {
	msg := fmt.Sprintf("carrier answered HTTP %d", e.StatusCode)
	if e.Code != "" {
		msg += " " + e.Code
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// maxBody bounds how much of a success body is read.
const maxBody = 1 << 20

// HTTPClient is a CarrierClient for the carriers' common JSON API:
//
//	GET {BaseURL}/v1/shipments/{number}
//	Authorization: Bearer {credential}
//
//	200 {"number": "...", "status": "in_transit" | "delivered" | "exception", "updated_at": "RFC 3339"}
//	404 {"error": {"code": "not_found", "message": "..."}}
//	429 {"error": {"code": "rate_limited", "message": "Rate limit exceeded. Please try again in 15 seconds."}}
//
// The retry hint of a 429 (or of a 503 with Retry-After) is read by
// hint.From from the headers or, as with this API, from the prose of
// the JSON body, and returned in a *quotagate.Refusal; without a readable
// hint the Refusal's Hint is 0 and the gate falls back on its own schedule.
//
// The credential travels only in the Authorization header: it is not part
// of the URL, an error or the client's printed form.
type HTTPClient struct {
	BaseURL    string       // e.g. "https://api.carrier.example"
	Credential string       // the API key
	HTTP       *http.Client // default http.DefaultClient
}

// String describes c without its credential, for %v and %s.
func (c *HTTPClient) String() string { return "tracking.HTTPClient(" + c.BaseURL + ")" }

// GoString describes c without its credential, for %#v.
func (c *HTTPClient) GoString() string { return c.String() }

// ShipmentURL returns the URL of number's shipment under base.
func ShipmentURL(base, number string) string {
	return strings.TrimSuffix(base, "/") + "/v1/shipments/" + url.PathEscape(number)
}

// Track polls number once.
func (c *HTTPClient) Track(ctx context.Context, number string) (Result, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ShipmentURL(c.BaseURL, number), nil)
	if err != nil {
		return Result{}, fmt.Errorf("tracking: build request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Credential)
	req.Header.Set("Accept", "application/json")
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return Result{}, fmt.Errorf("tracking: %w", err) // *url.Error: method and URL, no header
	}
	defer resp.Body.Close()

	if resp.StatusCode == http.StatusOK {
		var r Result
		if err := json.NewDecoder(io.LimitReader(resp.Body, maxBody)).Decode(&r); err != nil {
			return Result{}, fmt.Errorf("tracking: decode status of %s: %w", number, err)
		}
		if r.Number == "" {
			r.Number = number
		}
		return r, nil
	}

	body, err := io.ReadAll(io.LimitReader(resp.Body, hint.MaxBody))
	if err != nil {
		return Result{}, fmt.Errorf("tracking: read HTTP %d answer: %w", resp.StatusCode, err)
	}
	apiErr := &APIError{StatusCode: resp.StatusCode}
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil {
		apiErr.Code, apiErr.Message = e.Error.Code, e.Error.Message
	}
	switch {
	case hint.IsRefusal(resp):
		wait, _ := hint.From(resp, body) // 0 when unreadable: the gate's fallback applies
		return Result{}, &quotagate.Refusal{Hint: wait, Err: apiErr}
	case resp.StatusCode == http.StatusNotFound:
		return Result{}, fmt.Errorf("%w %s: %w", ErrUnknownNumber, number, apiErr)
	}
	return Result{}, apiErr
}
