package quotagate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"github.com/hibiken/asynq"
)

// Scope is the accounting boundary of a remote quota: every request made
// under one Scope spends the same provider capacity, so a refusal seen by one
// worker applies to all of them.
//
// Provider names the remote system ("ups", "stripe"). Account names the
// identity the provider counts against: a credential, an account or a tenant.
// Use an identity that is not itself a secret (an account number), or
// Fingerprint(secret) for a credential; an empty Account means the provider
// counts all callers together.
//
// A Scope is not job uniqueness: one worker per tracking number is asynq's
// business (TaskID, Unique); all tracking numbers polled with one credential
// share one Scope.
type Scope struct {
	Provider string
	Account  string
}

// MaxScopeField is the longest Provider or Account accepted, in bytes.
const MaxScopeField = 128

// ErrInvalidScope is returned (wrapped) for a Scope that cannot name a quota:
// an empty Provider, a field longer than MaxScopeField, invalid UTF-8 or a
// control character.
var ErrInvalidScope = errors.New("quotagate: invalid scope")

// String returns "provider" or "provider/account".
func (s Scope) String() string {
	if s.Account == "" {
		return s.Provider
	}
	return s.Provider + "/" + s.Account
}

// Validate reports whether s can name a quota. The error wraps
// ErrInvalidScope and never quotes the Account, which may be a mistake
// that holds a secret.
func (s Scope) Validate() error {
	if s.Provider == "" {
		return fmt.Errorf("%w: empty provider", ErrInvalidScope)
	}
	if err := checkField(s.Provider); err != nil {
		return fmt.Errorf("%w: provider %s", ErrInvalidScope, err)
	}
	if err := checkField(s.Account); err != nil {
		return fmt.Errorf("%w: account of provider %q %s", ErrInvalidScope, s.Provider, err)
	}
	return nil
}

func checkField(v string) error {
	if len(v) > MaxScopeField {
		return fmt.Errorf("is %d bytes long (max %d)", len(v), MaxScopeField)
	}
	if !utf8.ValidString(v) {
		return errors.New("is not valid UTF-8")
	}
	if strings.IndexFunc(v, unicode.IsControl) >= 0 {
		return errors.New("contains a control character")
	}
	return nil
}

// Fingerprint returns a stable, non-reversible identity for a credential,
// "fp:" followed by 24 hex digits of a domain-separated SHA-256. Use it as
// Scope.Account when the provider counts per credential: the secret itself
// never reaches Redis, a task header, an error or a log line.
func Fingerprint(secret string) string {
	sum := sha256.Sum256([]byte("quotagate/fingerprint/v1\x00" + secret))
	return "fp:" + hex.EncodeToString(sum[:12])
}

// Task headers that carry a Scope and the retry reserve (see NewTask).
const (
	HeaderProvider = "quotagate-provider"
	HeaderAccount  = "quotagate-account"
	HeaderMaxRetry = "quotagate-max-retry"
)

// defaultMaxRetry is asynq's default MaxRetry.
const defaultMaxRetry = 25

// NewTask returns an asynq task whose headers carry the scope s, so that the
// Middleware and RetryDelay of every worker find the quota it spends.
//
// NewTask also reserves one asynq retry for deferrals: asynq archives any
// error of a task on its last attempt, whatever IsFailure says, so a
// MaxRetry(n) task (n defaults to asynq's 25) is enqueued with MaxRetry(n+1)
// and a header that remembers n. The Middleware spends that extra retry only
// on deferrals, which never count as failures, and archives the task itself
// when a real failure exceeds n: a MaxRetry(0) task still runs its handler at
// most once, and a deferral never turns into an archived task. Pass MaxRetry
// here, not to Client.Enqueue, which would override the reserve (the
// Middleware then falls back to waiting in-process on a last attempt).
func NewTask(typename string, payload []byte, s Scope, opts ...asynq.Option) *asynq.Task {
	maxRetry := defaultMaxRetry
	kept := make([]asynq.Option, 0, len(opts)+1)
	for _, o := range opts {
		if o.Type() == asynq.MaxRetryOpt {
			if n, ok := o.Value().(int); ok {
				maxRetry = max(n, 0)
				continue
			}
		}
		kept = append(kept, o)
	}
	kept = append(kept, asynq.MaxRetry(maxRetry+1))
	h := map[string]string{
		HeaderProvider: s.Provider,
		HeaderMaxRetry: strconv.Itoa(maxRetry),
	}
	if s.Account != "" {
		h[HeaderAccount] = s.Account
	}
	return asynq.NewTaskWithHeaders(typename, payload, h, kept...)
}

// ScopeOf returns the scope carried by t's headers, and false when t carries
// none.
func ScopeOf(t *asynq.Task) (Scope, bool) {
	if t == nil {
		return Scope{}, false
	}
	h := t.Headers()
	p, ok := h[HeaderProvider]
	if !ok || p == "" {
		return Scope{}, false
	}
	return Scope{Provider: p, Account: h[HeaderAccount]}, true
}

// userMaxRetry returns the MaxRetry the task was created with by NewTask.
func userMaxRetry(t *asynq.Task) (int, bool) {
	v, ok := t.Headers()[HeaderMaxRetry]
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	return n, err == nil && n >= 0
}

// scopeCtx is the scope a context carries, whether the Middleware has
// already admitted its first request, and whether the task is on a last
// attempt without NewTask's retry reserve (a deferral would be archived, so
// the Transport waits in-process instead).
type scopeCtx struct {
	scope    Scope
	admitted *atomic.Bool
	mustHold bool
}

type scopeCtxKey struct{}

// WithScope returns a context that carries s, for Transport outside asynq
// (a web handler calling the same provider shares the gate).
func WithScope(ctx context.Context, s Scope) context.Context {
	return context.WithValue(ctx, scopeCtxKey{}, scopeCtx{scope: s})
}

// withAdmission is WithScope for a task the Middleware has just admitted: the
// first request through Transport spends that admission.
func withAdmission(ctx context.Context, s Scope, mustHold bool) context.Context {
	a := new(atomic.Bool)
	a.Store(true)
	return context.WithValue(ctx, scopeCtxKey{}, scopeCtx{scope: s, admitted: a, mustHold: mustHold})
}

// ScopeFromContext returns the scope ctx carries: the task's scope inside a
// handler run by the Middleware, or the one given to WithScope.
func ScopeFromContext(ctx context.Context) (Scope, bool) {
	v, ok := ctx.Value(scopeCtxKey{}).(scopeCtx)
	return v.scope, ok
}
