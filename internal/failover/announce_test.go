package failover

import (
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/feed"
	"github.com/quotagate/quotagate/internal/schema"
)

// TestHeard: a pause heard on the feed is remembered until its end by
// this process's clock; a budget's entry changes nothing, nor does an
// entry of another format; a resumed scope is forgotten.
func TestHeard(t *testing.T) {
	var m Memory
	recv := time.Unix(1_000, 0)
	const k = "qg:{ups:a}:pause"
	m.Heard(feed.Entry{Key: k, UntilMs: 1700000015000, NowMs: 1700000000000, Version: schema.FeedVersion}, recv)
	e, ok := m.Get(k, recv)
	if !ok || e.UntilMs != 1700000015000 || e.SeenMs != 1700000000000 || !e.End.Equal(recv.Add(15*time.Second)) || e.Operator {
		t.Fatalf("the pause heard is remembered as %+v, %v", e, ok)
	}
	m.Heard(feed.Entry{Key: k, Version: schema.FeedVersion}, recv)
	if _, ok := m.Get(k, recv); !ok {
		t.Error("a budget's entry forgot the pause")
	}
	m.Heard(feed.Entry{Key: k, Resumed: true, Version: schema.FeedVersion + 1}, recv)
	if _, ok := m.Get(k, recv); !ok {
		t.Error("an entry of another format forgot the pause")
	}
	m.Heard(feed.Entry{Key: k, Resumed: true, Version: schema.FeedVersion}, recv)
	if _, ok := m.Get(k, recv); ok {
		t.Error("the resumed scope is still remembered")
	}
	m.Heard(feed.Entry{Key: "qg:{ups:b}:pause", UntilMs: 1700000015000, NowMs: 1700000000000, Version: schema.FeedVersion + 1}, recv)
	if _, ok := m.Get("qg:{ups:b}:pause", recv); ok {
		t.Error("a pause of another format is remembered: its deadline may mean something else")
	}
}
