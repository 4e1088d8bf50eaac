package main

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate"
	"github.com/quotagate/quotagate/internal/schema"
)

// The key names come from internal/schema, as the library builds them.

// scopeKeyBase returns the part every key of s under prefix starts with,
// "<prefix>:{<provider>:<account>}:".
func scopeKeyBase(prefix string, s quotagate.Scope) string {
	return schema.ScopeKeys(prefix, s.Provider, s.Account).Base
}

// errNoSuchScope is the answer of state and resume for a scope with no
// record.
type errNoSuchScope struct {
	provider, prefix string
}

// Error names the provider and the prefix, not the account (which may be
// a mistake that holds a secret).
func (e errNoSuchScope) Error() string {
	return fmt.Sprintf("no such scope: nothing is recorded for provider %q with that account under prefix %q "+
		"(check both names and -prefix; a scope never paused, limited or observed has no record)", e.provider, e.prefix)
}

// hasRecord reports whether Redis holds any key of s under prefix: its
// pause, a limit's state, its reopening line, its budget, what it
// learned or its hintless episode. The keys with fixed names are checked with one EXISTS (they
// share a hash tag: one slot); only when none exists, a SCAN for the
// scope's keys, on the node that holds its slot, finds numbered limits.
func hasRecord(ctx context.Context, rdb redis.UniversalClient, prefix string, s quotagate.Scope) (bool, error) {
	base := scopeKeyBase(prefix, s)
	keys := make([]string, len(schema.Kinds))
	for i, k := range schema.Kinds {
		keys[i] = base + k
	}
	n, err := rdb.Exists(ctx, keys...).Result()
	if err != nil || n > 0 {
		return n > 0, err
	}
	var node redis.Cmdable = rdb
	if c, ok := rdb.(*redis.ClusterClient); ok {
		if node, err = c.MasterForKey(ctx, keys[0]); err != nil {
			return false, err
		}
	}
	pattern := schema.BasePattern(base)
	var cursor uint64
	for {
		found, next, err := node.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			return false, err
		}
		for _, k := range found {
			if k != base+"resumed" { // the note of the last Resume records nothing of the scope
				return true, nil
			}
		}
		if next == 0 {
			return false, nil
		}
		cursor = next
	}
}
