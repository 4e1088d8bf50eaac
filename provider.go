package quotagate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"github.com/quotagate/quotagate/internal/schema"
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

// scopeCtx is what a context carries for the gate: the scope, and for a
// task run by the Middleware, the task's own admission state.
type scopeCtx struct {
	scope Scope
	task  *taskAdmission // nil outside the Middleware (WithScope)
}

// taskAdmission is shared by the Middleware and the Transport during one
// task: whether the Middleware's admission is still unspent (the first
// request spends it), whether a deferral would be archived (the Transport
// then waits in-process), and the pause the Transport recorded for a
// refusal, so the Middleware does not record the same refusal twice.
type taskAdmission struct {
	keys     schema.Keys // of the task's scope
	unspent  atomic.Bool
	mustHold bool
	class    Class
	grant    grant                    // what the admission tells the first request's response
	refused  atomic.Pointer[recorded] // the pause the Transport recorded (err nil)
	answered atomic.Bool              // the learned window its grant opened was answered
	released atomic.Bool              // its grant's lease was released (see Gate.release)
	refusal  atomic.Bool              // its handler returned a Refusal: its release is not an answer
}

type scopeCtxKey struct{}

// WithScope returns a context that carries s, for Transport outside asynq
// (a web handler calling the same provider shares the gate).
func WithScope(ctx context.Context, s Scope) context.Context {
	return context.WithValue(ctx, scopeCtxKey{}, scopeCtx{scope: s})
}

// withAdmission is WithScope for a task the Middleware has just admitted.
func withAdmission(ctx context.Context, s Scope, ta *taskAdmission) context.Context {
	return context.WithValue(ctx, scopeCtxKey{}, scopeCtx{scope: s, task: ta})
}

// ScopeFromContext returns the scope ctx carries: the task's scope inside a
// handler run by the Middleware, or the one given to WithScope.
func ScopeFromContext(ctx context.Context) (Scope, bool) {
	v, ok := ctx.Value(scopeCtxKey{}).(scopeCtx)
	return v.scope, ok
}
