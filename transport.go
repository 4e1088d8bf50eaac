package quotagate

import (
	"bytes"
	"io"
	"net/http"

	"github.com/quotagate/quotagate/hint"
)

// Transport returns an http.RoundTripper that applies the gate to every
// request whose context carries a scope: the task's scope inside a handler
// run by the Middleware, or one given with WithScope anywhere else (a web
// handler calling the same provider shares the gate with the workers).
// Requests without a scope pass straight to base (http.DefaultTransport when
// nil).
//
// Before sending, the request is admitted like a task: while the scope is
// paused, or its limit has no capacity within Config.MaxHold, no request
// leaves and RoundTrip returns a *Deferral (inside an asynq handler, return
// it and the task is deferred without spending a retry). The first request
// of a task the Middleware has just admitted spends that admission instead
// of a second round trip.
//
// When the response is a refusal (429, or 503 with Retry-After) the transport
// records the pause itself, with the hint read by hint.From from the headers
// and the first hint.MaxBody bytes of the body, and returns the response
// unchanged: its body still reads from the first byte.
func (g *Gate) Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{g: g, base: base}
}

type transport struct {
	g    *Gate
	base http.RoundTripper
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	sc, ok := ctx.Value(scopeCtxKey{}).(scopeCtx)
	if !ok {
		return t.base.RoundTrip(req)
	}
	if sc.admitted == nil || !sc.admitted.CompareAndSwap(true, false) {
		err := sc.scope.Validate()
		if err == nil {
			err = t.g.admit(ctx, sc.scope, 1, sc.mustHold)
		}
		if err != nil {
			if req.Body != nil {
				req.Body.Close() // a RoundTripper closes the body, even on errors
			}
			return nil, err
		}
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil || !isRefusal(resp) {
		return resp, err
	}
	var prefix []byte
	if resp.Body != nil {
		prefix, _ = io.ReadAll(io.LimitReader(resp.Body, hint.MaxBody))
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(prefix), resp.Body), resp.Body}
	}
	wait, _ := hint.From(resp, prefix)
	t.g.record(ctx, sc.scope, &Refusal{Hint: wait})
	return resp, nil
}

// isRefusal reports whether resp refuses a request for quota.
func isRefusal(resp *http.Response) bool {
	return resp.StatusCode == http.StatusTooManyRequests ||
		resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != ""
}
