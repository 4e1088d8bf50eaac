package feed

import (
	"errors"
	"strconv"
	"strings"

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

// An entry of a log is one field of a stream's entry, e, one line: the
// envelope, which every format keeps, then its format's payload, which
// holds no newline:
//
//	<version> <length of the key> <key> <payload>\n
//
// This format's payload is "<deadline ms> <Redis TIME ms> <resumed: 1 or 0>".
// The key is counted, not delimited: an account may hold any byte.

// encode is e's line in a log, of this package's format.
func encode(e Entry) string {
	resumed := "0"
	if e.Resumed {
		resumed = "1"
	}
	return strconv.Itoa(schema.FeedVersion) + " " + strconv.Itoa(len(e.Key)) + " " + e.Key + " " +
		strconv.FormatInt(e.UntilMs, 10) + " " + strconv.FormatInt(e.NowMs, 10) + " " + resumed + "\n"
}

// errFraming is a log's bytes that are not whole entries.
var errFraming = errors.New("quotagate: the feed's log is not whole entries")

// fieldEntry is the stream field an entry is in.
const fieldEntry = "e"

// entryOf decodes a log's message: nothing (ok false) when it holds no
// whole entry.
func entryOf(m redis.XMessage) (Entry, bool) {
	b, _ := m.Values[fieldEntry].(string)
	es, err := decode(b)
	if err != nil || len(es) != 1 {
		return Entry{}, false
	}
	return es[0], true
}

// decode splits a log's bytes into entries. An entry of another format
// has its key and version only; bytes that are not whole entries are
// errFraming, with the entries before them.
func decode(b string) ([]Entry, error) {
	var out []Entry
	for b != "" {
		e, rest, ok := decodeOne(b)
		if !ok {
			return out, errFraming
		}
		out, b = append(out, e), rest
	}
	return out, nil
}

// decodeOne reads the entry b begins with, and returns the bytes after it.
func decodeOne(b string) (e Entry, rest string, ok bool) {
	e, payload, rest, ok := decodeHeader(b)
	if !ok {
		return e, "", false
	}
	if !e.Current() {
		return e, rest, true
	}
	if !decodePayload(&e, payload) {
		return e, "", false
	}
	return e, rest, true
}

// decodeHeader reads an entry's "<version> <key length> <key> " and the
// payload up to the newline that ends it.
func decodeHeader(b string) (e Entry, payload, rest string, ok bool) {
	v, b, ok1 := strings.Cut(b, " ")
	n, b, ok2 := strings.Cut(b, " ")
	version, err1 := strconv.Atoi(v)
	keyLen, err2 := strconv.Atoi(n)
	if !ok1 || !ok2 || err1 != nil || err2 != nil || keyLen <= 0 || len(b) < keyLen+1 || b[keyLen] != ' ' {
		return e, "", "", false
	}
	e.Key, e.Version = b[:keyLen], version
	payload, rest, ok = strings.Cut(b[keyLen+1:], "\n")
	return e, payload, rest, ok
}

// decodePayload reads the current format's "<until ms> <now ms> <0|1>"
// into e.
func decodePayload(e *Entry, payload string) bool {
	f := strings.Fields(payload)
	if len(f) != 3 || (f[2] != "0" && f[2] != "1") {
		return false
	}
	var err1, err2 error
	e.UntilMs, err1 = strconv.ParseInt(f[0], 10, 64)
	e.NowMs, err2 = strconv.ParseInt(f[1], 10, 64)
	e.Resumed = f[2] == "1"
	return err1 == nil && err2 == nil
}
