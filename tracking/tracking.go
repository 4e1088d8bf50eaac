// Package tracking polls shipment status per tracking number through asynq,
// with the carrier's quota guarded by a quotagate.Gate.
//
// Two scopes meet here and must not be confused:
//
//	job uniqueness:  one poll per tracking number             asynq.TaskID("poll:<carrier>:<number>")
//	remote quota:    all numbers polled with one credential   quotagate.Scope{carrier, Fingerprint(credential)}
//
// # Uniqueness per tracking number
//
// A poll task carries the ID "poll:<carrier>:<number>" (see TaskID). asynq
// rejects a second task with the same ID for as long as the first one exists
// in any state (pending, scheduled, waiting in the retry set, running, or
// archived), so Enqueue returns an error wrapping asynq.ErrTaskIDConflict
// while a poll of that number is outstanding, however long a quota pause
// keeps it waiting. The ID is free again as soon as the poll completes (no
// Retention is set).
//
// asynq.Unique was the alternative and was rejected: it locks on a key with a
// TTL chosen at enqueue time. A TTL shorter than the time a poll may wait
// (deferrals behind a long pause, retries with backoff) lets a duplicate in
// while the first poll still waits; a longer one keeps rejecting new polls
// after the first one finished abnormally. TaskID needs no TTL: the task
// itself is the lock. Its one cost is deliberate: an archived poll keeps its
// number blocked until someone runs or deletes it (asynqmon, Inspector),
// which is when a human should look anyway.
//
// # The quota scope
//
// A carrier's quota belongs to the credential the requests are signed with,
// or, for carriers that count per account across credentials, to the
// account (Carrier.Account). Every poll task carries that scope in its
// headers (quotagate.NewTask), so one 429 pauses all numbers of the scope
// and nothing else: numbers polled with another credential or at another
// carrier go on.
//
// No credential ever enters a task, a header, a Redis key, a log line or an
// error: a task carries the credential's fingerprint (Carrier.Key), and the
// ClientResolver maps that fingerprint back to a client holding the secret,
// inside the worker, after the gate admitted the task.
//
// # What a poll does next
//
// Handler polls once and reports the Result (Handler.Report). A delivered
// shipment is final. A shipment still in transit is reported too and the
// task completes: the next poll is the business of the periodic sweep that
// enqueues polls for every open shipment (an asynq.Scheduler entry, say every
// 30 minutes). The handler cannot re-enqueue its own number: the running task
// still holds the TaskID, so the follow-up would conflict; and a sweep that
// meets a conflict is exactly right, the previous poll is still outstanding.
package tracking

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"

	"github.com/hibiken/asynq"
	"github.com/quotagate/quotagate"
)

// TypePoll is the asynq task type of a poll.
const TypePoll = "tracking:poll"

// ErrInvalid is returned (wrapped) for a carrier or tracking number that
// cannot name a poll. Errors wrapping it never quote a credential key.
var ErrInvalid = errors.New("tracking: invalid poll")

// Carrier names the carrier account a poll spends quota from.
type Carrier struct {
	// Name is the carrier ("acme"): 1 to 32 of a-z, 0-9, '_' and '-'. It is
	// the scope's provider and part of the task ID.
	Name string

	// Key is the fingerprint of the credential the polls are signed with,
	// quotagate.Fingerprint(credential), never the credential itself (a
	// value that is not a fingerprint is rejected).
	Key string

	// Account, when set, is the carrier's (non-secret) account identity, for
	// carriers that count their quota per account across credentials: the
	// scope is then the account, not the credential.
	Account string
}

// NewCarrier returns the Carrier for polls signed with credential at the
// carrier name. Only the credential's fingerprint is kept.
func NewCarrier(name, credential string) Carrier {
	return Carrier{Name: name, Key: quotagate.Fingerprint(credential)}
}

// Scope returns the quota scope of c's polls: the account when set, else the
// credential's fingerprint.
func (c Carrier) Scope() quotagate.Scope {
	if c.Account != "" {
		return quotagate.Scope{Provider: c.Name, Account: c.Account}
	}
	return quotagate.Scope{Provider: c.Name, Account: c.Key}
}

var (
	nameRE   = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)
	keyRE    = regexp.MustCompile(`^fp:[0-9a-f]{24}$`)
	numberRE = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)
)

// Validate reports whether c can name a poll. The error never quotes Key.
func (c Carrier) Validate() error {
	if !nameRE.MatchString(c.Name) {
		return fmt.Errorf("%w: carrier name %q (want 1-32 of a-z, 0-9, _ and -)", ErrInvalid, c.Name)
	}
	if !keyRE.MatchString(c.Key) {
		return fmt.Errorf("%w: credential key of carrier %s is not a fingerprint (use quotagate.Fingerprint)", ErrInvalid, c.Name)
	}
	if err := c.Scope().Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// Poll is the payload of a poll task: which number, at which carrier, with
// which credential (by fingerprint).
type Poll struct {
	Carrier string `json:"carrier"`
	Key     string `json:"key"`               // credential fingerprint
	Account string `json:"account,omitempty"` // Carrier.Account, if any
	Number  string `json:"number"`
}

// CarrierAccount returns the carrier account the poll spends quota from.
func (p Poll) CarrierAccount() Carrier {
	return Carrier{Name: p.Carrier, Key: p.Key, Account: p.Account}
}

// Validate reports whether p names a valid poll.
func (p Poll) Validate() error {
	if err := p.CarrierAccount().Validate(); err != nil {
		return err
	}
	if !numberRE.MatchString(p.Number) {
		return fmt.Errorf("%w: tracking number %q (want 1-64 of A-Z, a-z, 0-9 and -)", ErrInvalid, p.Number)
	}
	return nil
}

// TaskID returns the asynq task ID of the poll of number at carrier,
// "poll:<carrier>:<number>": one outstanding poll per number.
func TaskID(carrier, number string) string {
	return "poll:" + carrier + ":" + number
}

// NewPollTask returns the poll task of number at c: TypePoll, the Poll
// payload, c's quota scope in the headers and TaskID as its ID. opts are
// passed to quotagate.NewTask (Queue, MaxRetry, ...); a TaskID among them is
// overridden.
func NewPollTask(c Carrier, number string, opts ...asynq.Option) (*asynq.Task, error) {
	p := Poll{Carrier: c.Name, Key: c.Key, Account: c.Account, Number: number}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	payload, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("tracking: encode poll: %w", err)
	}
	opts = append(opts[:len(opts):len(opts)], asynq.TaskID(TaskID(c.Name, number)))
	return quotagate.NewTask(TypePoll, payload, c.Scope(), opts...), nil
}

// Enqueue enqueues the poll of number at c. While a poll of that number
// exists (pending, waiting or archived), it returns an error wrapping
// asynq.ErrTaskIDConflict.
func Enqueue(ctx context.Context, client *asynq.Client, c Carrier, number string, opts ...asynq.Option) (*asynq.TaskInfo, error) {
	t, err := NewPollTask(c, number, opts...)
	if err != nil {
		return nil, err
	}
	info, err := client.EnqueueContext(ctx, t)
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		return nil, fmt.Errorf("tracking: a poll of %s %s already exists: %w", c.Name, number, err)
	}
	if err != nil {
		return nil, fmt.Errorf("tracking: enqueue poll of %s %s: %w", c.Name, number, err)
	}
	return info, nil
}

// ParsePoll decodes and validates the payload of a poll task. Its errors
// wrap asynq.SkipRetry: a malformed poll never becomes valid by retrying.
func ParsePoll(t *asynq.Task) (Poll, error) {
	var p Poll
	if err := json.Unmarshal(t.Payload(), &p); err != nil {
		return Poll{}, fmt.Errorf("tracking: decode poll: %w: %w", err, asynq.SkipRetry)
	}
	if err := p.Validate(); err != nil {
		return Poll{}, fmt.Errorf("%w: %w", err, asynq.SkipRetry)
	}
	return p, nil
}
