package failover

import (
	"time"

	"github.com/quotagate/quotagate/internal/feed"
)

// Heard takes in an entry of the feed (internal/feed) read at recv by
// this process's clock: a pause is remembered, a resumed scope forgotten;
// an entry of another format, or of a budget, changes nothing.
func (m *Memory) Heard(e feed.Entry, recv time.Time) {
	switch {
	case !e.Current():
	case e.Resumed:
		m.Drop(e.Key)
	case e.UntilMs > 0:
		m.Note(e.Key, e.UntilMs, e.NowMs, recv, false)
	}
}
