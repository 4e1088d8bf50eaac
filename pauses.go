package quotagate

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/quotagate/quotagate/internal/schema"
)

// MaxListed is the most pauses Pauses lists: far more scopes than a fleet
// pauses at once (a scope is a provider account), few enough that reading
// them all stays a matter of seconds (one round trip each).
const MaxListed = 10_000

// ErrTruncated is returned (wrapped) by Pauses, together with the first
// MaxListed pauses found, when more pause keys exist.
var ErrTruncated = errors.New("quotagate: listing truncated")

// Pauses lists every scope under the gate's Prefix that waits now, for any
// reason (a pause, a spent budget, a limit with no capacity within
// MaxHold, the learned limit), sorted by provider and account, each read by
// State (so with its Reason, Budget, Learned limit and backlog).
//
// It walks the keyspace with SCAN (never KEYS) on every master of a
// cluster client (every shard of a ring; the one server otherwise), each
// call bounded by Config.StoreTimeout, and decodes the key names back to
// scopes (pause, budget, limit and line keys); keys that quotagate did not
// write are ignored. Scopes that admit again, or whose records read as
// malformed, by the time they are read are left out, as they are open.
// Past MaxListed scopes it stops and returns what it has read with an error
// wrapping ErrTruncated. The whole listing is bounded by
// ctx only: give it a deadline.
func (g *Gate) Pauses(ctx context.Context) ([]Pause, error) {
	scopes, scanErr := g.pausedScopes(ctx, MaxListed)
	if scanErr != nil && !errors.Is(scanErr, ErrTruncated) {
		return nil, fmt.Errorf("quotagate: list pauses: %w", scanErr)
	}
	out := make([]Pause, 0, len(scopes))
	for _, s := range scopes {
		p, err := g.State(ctx, s)
		if err != nil {
			return nil, err
		}
		if !p.Until.IsZero() {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b Pause) int {
		return cmp.Or(cmp.Compare(a.Scope.Provider, b.Scope.Provider), cmp.Compare(a.Scope.Account, b.Scope.Account))
	})
	return out, scanErr
}

// pausedScopes returns the scopes of the pause keys found by SCAN, at most
// limit of them (then with ErrTruncated).
func (g *Gate) pausedScopes(ctx context.Context, limit int) ([]Scope, error) {
	pattern := schema.KeyPattern(g.cfg.Prefix)
	var (
		mu        sync.Mutex
		seen      = make(map[Scope]bool)
		truncated bool
	)
	// add records the scopes of keys and reports whether to go on.
	add := func(keys []string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range keys {
			s, ok := scopeOfWaitKey(g.cfg.Prefix, k)
			if !ok || seen[s] {
				continue
			}
			if len(seen) == limit {
				truncated = true
				return false
			}
			seen[s] = true
		}
		return !truncated
	}
	if err := g.store.Scan(ctx, pattern, add); err != nil {
		return nil, err
	}
	scopes := make([]Scope, 0, len(seen))
	for s := range seen {
		scopes = append(scopes, s)
	}
	if truncated {
		return scopes, fmt.Errorf("%w at %d pauses", ErrTruncated, limit)
	}
	return scopes, nil
}

// pauseJSON is the JSON shape of a Pause.
type pauseJSON struct {
	Provider            string  `json:"provider"`
	Account             string  `json:"account"`
	Paused              bool    `json:"paused"`
	Until               string  `json:"until,omitempty"`
	RemainingSeconds    float64 `json:"remaining_seconds"`
	LimitBacklogSeconds float64 `json:"limit_backlog_seconds"`
}

// RFC3339Milli is the layout of the deadlines quotagate prints: RFC 3339 in
// UTC with exactly three fractional digits.
const RFC3339Milli = "2006-01-02T15:04:05.000Z07:00"

// MarshalJSON encodes p for scripts, as the quotagate command and the
// inspect page print it:
//
//	{"provider":"acme","account":"fp:…","paused":true,"until":"2025-01-02T03:04:05.678Z",
//	 "remaining_seconds":12.5,"limit_backlog_seconds":0}
//
// until (RFC3339Milli, UTC) is absent when the scope is open; durations are
// in seconds, to the millisecond.
func (p Pause) MarshalJSON() ([]byte, error) {
	j := pauseJSON{
		Provider:            p.Scope.Provider,
		Account:             p.Scope.Account,
		Paused:              !p.Until.IsZero(),
		RemainingSeconds:    p.Remaining.Round(time.Millisecond).Seconds(),
		LimitBacklogSeconds: p.LimitBacklog.Round(time.Millisecond).Seconds(),
	}
	if j.Paused {
		j.Until = p.Until.UTC().Format(RFC3339Milli)
	}
	return json.Marshal(j)
}
