package failover

import (
	"strconv"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/feed"
	"github.com/quotagate/quotagate/internal/schema"
)

// TestMemoryBound: the memory keeps at most maxRemembered pauses,
// evicting the earliest-ending first, and refuses one that would end
// before all of them; an ended pause is forgotten.
func TestMemoryBound(t *testing.T) {
	var m Memory
	now := time.Unix(1_000, 0)
	for i := range maxRemembered {
		m.Note("k"+strconv.Itoa(i), 10_000+int64(i), 0, now, false) // k0 ends first
	}
	if m.size() != maxRemembered {
		t.Fatalf("size %d, want %d", m.size(), maxRemembered)
	}
	m.Note("early", 5_000, 0, now, false)
	if _, ok := m.Get("early", now); ok || m.size() != maxRemembered {
		t.Errorf("a pause ending before every remembered one was remembered (size %d)", m.size())
	}
	m.Note("late", 99_000, 0, now, false)
	if _, ok := m.Get("k0", now); ok {
		t.Error("the earliest-ending pause was not evicted")
	}
	if _, ok := m.Get("late", now); !ok || m.size() != maxRemembered {
		t.Errorf("the later pause was not remembered in its place (size %d)", m.size())
	}
	// A later deadline or end wins; an earlier one changes nothing.
	m.Note("late", 50_000, 0, now, false)
	if e, _ := m.Get("late", now); e.UntilMs != 99_000 || !e.End.Equal(now.Add(99*time.Second)) {
		t.Errorf("an earlier deadline moved the remembered one: %+v", e)
	}
	if _, ok := m.Get("k1", now.Add(11*time.Second)); ok {
		t.Error("a pause that has ended is still remembered")
	}
}

// TestMemoryNil: a nil memory (a gate that remembers nothing) takes every
// call and remembers nothing.
func TestMemoryNil(t *testing.T) {
	var m *Memory
	now := time.Unix(1_000, 0)
	m.Note("k", 2_000_000, 1_990_000, now, false)
	m.Heard(feed.Entry{Key: "k", UntilMs: 2_000_000, NowMs: 1_990_000, Version: schema.FeedVersion}, now)
	m.Drop("k")
	m.Recovered()
	m.Reannounce(now)
	m.Close()
	if _, ok := m.Get("k", now); ok || m.Reasserted() != 0 {
		t.Error("a nil memory remembered a pause")
	}
	if again, err := m.Recheck(t.Context(), "k", Answer{NowUs: 1_990_000_000, HeldUs: 1_990_000_000, Recv: now}); again || err != nil {
		t.Errorf("a nil memory's Recheck = %v, %v; want false, nil", again, err)
	}
}
