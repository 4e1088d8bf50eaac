package quotagate

import "github.com/quotagate/quotagate/internal/schema"

// scopeKeys are the Redis keys of s under prefix (see internal/schema).
func scopeKeys(prefix string, s Scope) schema.Keys {
	return schema.ScopeKeys(prefix, s.Provider, s.Account)
}

// limitKey returns the state key of the i-th limit l of a scope.
func limitKey(k schema.Keys, i int, l Limit) string { return k.Limit(i, l.kind()) }

// kind is the kind of l, which names its key.
func (l Limit) kind() schema.LimitKind {
	return schema.KindOf(l.Fixed, l.Sliding, l.Concurrent)
}

// scopeOfPauseKey is the exact inverse of scopeKeys(prefix, s).Pause: it
// returns the valid scope whose pause key under prefix is key, and false for
// any key scopeKeys cannot have written.
func scopeOfPauseKey(prefix, key string) (Scope, bool) {
	p, a, ok := schema.ParsePauseKey(prefix, key)
	s := Scope{Provider: p, Account: a}
	if !ok || s.Validate() != nil {
		return Scope{}, false
	}
	return s, true
}

// scopeOfWaitKey returns the scope of a key under prefix whose presence
// may hold a scope back, as scopeOfPauseKey does for pause keys.
func scopeOfWaitKey(prefix, key string) (Scope, bool) {
	pk, ok := schema.PauseKeyOfWait(key)
	if !ok {
		return Scope{}, false
	}
	return scopeOfPauseKey(prefix, pk)
}
