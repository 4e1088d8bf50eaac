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
		m.named(e.Key, recv)
	}
}

// named records that the feed named the remembered pause of key at recv.
func (m *Memory) named(key string, recv time.Time) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.m[key]; ok && recv.After(e.heard) {
		e.heard = recv
		m.m[key] = e
	}
}

// Reannounce has every remembered pause in force that the feed has not
// named since since announced again by the next run of ReassertLost (the
// recovery that follows asks for it: Recovered):
// since is the start of the poll that loaded the feed's snapshot after a
// gap, which named every pause its groups keep. One it does not name was
// lost with the entries a failed master had not replicated (while the
// pause's own key, on another master, may be intact: no re-assertion would
// move it), or was never announced. The run re-asserts each
// (store.Reassert), which checks it against the scope's records: a
// resumed scope is forgotten, a pause in force announced.
func (m *Memory) Reannounce(since time.Time) {
	if m == nil {
		return
	}
	m.mu.Lock()
	if since.After(m.namedSince) {
		m.namedSince = since
	}
	m.mu.Unlock()
}

// unnamed reports whether the feed has not named the remembered pause of
// key since the last snapshot Reannounce was told of: its announcement
// may be lost. It reads the pause as remembered now, not a run's copy: a
// run that began before the snapshot holds the times heard before it,
// and would announce again every pause the snapshot named.
func (m *Memory) unnamed(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.m[key]
	return ok && e.heard.Before(m.namedSince)
}
