package store

import (
	"context"

	"github.com/quotagate/quotagate/internal/feed"
)

// announce appends e to the feed (internal/feed) after the script whose
// change it tells the other gates. A failure is logged, not returned: the
// change is in force in Redis, where every admission that asks finds it,
// and the gates that trust the scope open without asking do so for at
// most their open cache's age.
func (s *Store) announce(ctx context.Context, e feed.Entry) {
	_, err := bounded(ctx, s, "announce", func(ctx context.Context) (struct{}, error) {
		return struct{}{}, feed.Append(ctx, s.rdb, s.prefix, e)
	})
	if err != nil && s.log != nil {
		s.log.Warn("quotagate: a scope's change is in force but was not announced to the other gates", "err", err)
	}
}
