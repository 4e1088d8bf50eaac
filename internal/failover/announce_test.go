package failover

import (
	"testing"
	"time"
)

// TestAnnouncement: what the channel's payloads say.
func TestAnnouncement(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Announcement
	}{
		{"qg:{ups:a}:pause", Announcement{Key: "qg:{ups:a}:pause"}},
		{"qg:{ups:a}:pause 1700000000123 1700000000000", Announcement{Key: "qg:{ups:a}:pause", UntilMs: 1700000000123, NowMs: 1700000000000}},
		{"qg:{ups:a b}:pause resumed", Announcement{Key: "qg:{ups:a b}:pause", Resumed: true}},
		{"qg:{ups:a}:pause x y", Announcement{Key: "qg:{ups:a}:pause"}},
		{"odd", Announcement{Key: "odd"}},
	} {
		if got := ParseAnnouncement(c.in); got != c.want {
			t.Errorf("ParseAnnouncement(%q) = %+v, want %+v", c.in, got, c.want)
		}
	}
}

// TestHeard: an announced pause is remembered until its end by this
// process's clock; a resumed scope is forgotten; a bare key changes
// nothing.
func TestHeard(t *testing.T) {
	var m Memory
	recv := time.Unix(1_000, 0)
	m.Heard(ParseAnnouncement("qg:{ups:a}:pause 1700000015000 1700000000000"), recv)
	e, ok := m.Get("qg:{ups:a}:pause", recv)
	if !ok || e.UntilMs != 1700000015000 || e.SeenMs != 1700000000000 || !e.End.Equal(recv.Add(15*time.Second)) || e.Operator {
		t.Fatalf("the announced pause is remembered as %+v, %v", e, ok)
	}
	m.Heard(ParseAnnouncement("qg:{ups:a}:pause"), recv)
	if _, ok := m.Get("qg:{ups:a}:pause", recv); !ok {
		t.Error("a bare key forgot the pause")
	}
	m.Heard(ParseAnnouncement("qg:{ups:a}:pause resumed"), recv)
	if _, ok := m.Get("qg:{ups:a}:pause", recv); ok {
		t.Error("the resumed scope is still remembered")
	}
}
