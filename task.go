package quotagate

import (
	"context"
	"strconv"

	"github.com/hibiken/asynq"
)

// How a scope rides on an asynq task, and the retry reserve that keeps a
// deferral from ever archiving a task. Read top to bottom: the headers,
// NewTask that writes them, ScopeOf that reads them, then the last-attempt
// decision the Middleware takes from them.

// Task headers that carry a Scope and the retry reserve (see NewTask).
const (
	headerProvider = "quotagate-provider"
	headerAccount  = "quotagate-account"
	headerMaxRetry = "quotagate-max-retry"
)

// defaultMaxRetry is asynq's default MaxRetry.
const defaultMaxRetry = 25

// NewTask returns an asynq task whose headers carry the scope s
// ("quotagate-provider", "quotagate-account"), so that the Middleware and
// RetryDelay of every worker find the quota it spends.
//
// NewTask also reserves one asynq retry for deferrals: asynq archives any
// error of a task on its last attempt, whatever IsFailure says, so a
// MaxRetry(n) task (n defaults to asynq's 25) is enqueued with MaxRetry(n+1)
// and a header, "quotagate-max-retry", that remembers n. The Middleware
// spends that extra retry only on deferrals, which never count as failures,
// and archives the task itself when a real failure exceeds n: a MaxRetry(0)
// task still runs its handler at most once, and a deferral never turns into
// an archived task. Pass MaxRetry here, not to Client.Enqueue, which would
// override the reserve (the Middleware then falls back to waiting in-process
// on a last attempt).
//
// A Class among opts (Interactive, Background) is the task's class within
// its scope, carried by the "quotagate-class" header (see Class).
func NewTask(typename string, payload []byte, s Scope, opts ...asynq.Option) *asynq.Task {
	maxRetry := defaultMaxRetry
	kept := make([]asynq.Option, 0, len(opts)+1)
	class, classed := Background, false
	for _, o := range opts {
		if c, ok := o.(Class); ok {
			class, classed = c, true
			continue
		}
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
		headerProvider: s.Provider,
		headerMaxRetry: strconv.Itoa(maxRetry),
	}
	if s.Account != "" {
		h[headerAccount] = s.Account
	}
	if classed {
		h[headerClass] = class.String()
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
	p, ok := h[headerProvider]
	if !ok || p == "" {
		return Scope{}, false
	}
	return Scope{Provider: p, Account: h[headerAccount]}, true
}

// userMaxRetry returns the MaxRetry the task was created with by NewTask.
func userMaxRetry(t *asynq.Task) (int, bool) {
	v, ok := t.Headers()[headerMaxRetry]
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	return n, err == nil && n >= 0
}

// attempt is where a task stands in its retry budget, as the Middleware
// sees it when the task is dequeued.
type attempt struct {
	// reserved: the task carries NewTask's reserve, untouched by Enqueue.
	reserved bool
	// budget is the user's MaxRetry (meaningful when reserved).
	budget int
	// retried is asynq's retry count of this attempt.
	retried int
	// last: a deferral now would be archived (the task has no reserve and
	// this is its last attempt), so the gate must wait in-process instead.
	last bool
}

// attemptOf reads the task's retry state from asynq's context.
func attemptOf(ctx context.Context, t *asynq.Task) attempt {
	retried, _ := asynq.GetRetryCount(ctx)
	maxRetry, inAsynq := asynq.GetMaxRetry(ctx)
	budget, reserved := userMaxRetry(t)
	// The reserve is there only if Client.Enqueue did not override
	// NewTask's MaxRetry; an override is the user's budget.
	reserved = reserved && maxRetry == budget+1
	return attempt{
		reserved: reserved,
		budget:   budget,
		retried:  retried,
		last:     inAsynq && !reserved && retried >= maxRetry,
	}
}

// settle is the task's final error: a real failure that has used the user's
// whole budget is archived now (exhausted), before asynq would spend the
// reserve on it; anything else goes back to asynq as it is.
func (a attempt) settle(err error) error {
	if err != nil && a.reserved && IsFailure(err) && a.retried >= a.budget {
		return exhausted{err}
	}
	return err
}

// exhausted marks a real failure past the user's MaxRetry of a task that
// carries NewTask's retry reserve: asynq archives it (SkipRetry) with the
// original message.
type exhausted struct{ err error }

func (e exhausted) Error() string   { return e.err.Error() }
func (e exhausted) Unwrap() []error { return []error{e.err, asynq.SkipRetry} }
