package failover

import (
	"strconv"
	"strings"
	"time"
)

// Announcement is one message on a gate's channel (schema.Channel): a
// pause key, and, for a pause, its deadline and the Redis TIME it was set
// at (ms), or that the scope was resumed. A message of the pause key alone
// (a budget observed) carries neither.
type Announcement struct {
	Key            string
	UntilMs, NowMs int64
	Resumed        bool
}

// ParseAnnouncement parses the payload of a message on a gate's channel:
// "<pause key>", "<pause key> <deadline ms> <now ms>" or "<pause key>
// resumed". A pause key ends with ":pause", which no escaped scope
// contains otherwise.
func ParseAnnouncement(payload string) Announcement {
	i := strings.LastIndex(payload, ":pause")
	if i < 0 {
		return Announcement{Key: payload}
	}
	a := Announcement{Key: payload[:i+len(":pause")]}
	f := strings.Fields(payload[i+len(":pause"):])
	switch {
	case len(f) == 1 && f[0] == "resumed":
		a.Resumed = true
	case len(f) == 2:
		u, err1 := strconv.ParseInt(f[0], 10, 64)
		n, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 == nil && err2 == nil {
			a.UntilMs, a.NowMs = u, n
		}
	case len(f) != 0:
		return Announcement{Key: payload}
	}
	return a
}

// Heard takes in an announcement received at recv by this process's
// clock: a pause is remembered, a resumed scope forgotten.
func (m *Memory) Heard(a Announcement, recv time.Time) {
	switch {
	case a.Resumed:
		m.Drop(a.Key)
	case a.UntilMs > 0:
		m.Note(a.Key, a.UntilMs, a.NowMs, recv, false)
	}
}
