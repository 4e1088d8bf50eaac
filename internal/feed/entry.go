package feed

import (
	"strconv"

	"github.com/quotagate/quotagate/internal/schema"

	"github.com/redis/go-redis/v9"
)

// Entry is one entry of the feed: the scope of pause key Key paused until
// UntilMs (Unix ms of Redis TIME, set at NowMs), resumed (Resumed), or,
// with neither, a scope whose admissions must now ask Redis (it gained a
// budget). Version is its format (schema.FeedVersion for what this
// package writes).
type Entry struct {
	Key            string
	UntilMs, NowMs int64
	Resumed        bool
	Version        int
}

// Current reports whether e is of this package's format: only then do
// its deadline and its Redis TIME mean what Entry says.
func (e Entry) Current() bool { return e.Version == schema.FeedVersion }

// The fields of an entry in a log.
const (
	fieldVersion = "v"
	fieldKey     = "k"
	fieldUntil   = "u"
	fieldNow     = "n"
	fieldResumed = "r"
)

// entryOf decodes a log's message: a field missing or malformed is zero
// (a message without a key names no scope: the zero Entry).
func entryOf(m redis.XMessage) Entry {
	str := func(f string) string { s, _ := m.Values[f].(string); return s }
	num := func(f string) int64 { n, _ := strconv.ParseInt(str(f), 10, 64); return n }
	return Entry{Key: str(fieldKey), UntilMs: num(fieldUntil), NowMs: num(fieldNow), Resumed: str(fieldResumed) == "1",
		Version: int(num(fieldVersion))}
}
