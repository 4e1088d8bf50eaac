// Package schema names the Redis keys of a scope and the fields of its
// records, in one place: the gate's scripts, the quotagate command and the
// inspector all build them from here.
//
// Every key of one scope shares one hash tag, so a multi-key script stays
// Redis Cluster safe, while different scopes spread over slots:
//
//	<prefix>:{<provider>:<account>}:pause    the pause deadline, Unix ms (string; expires at it)
//	<prefix>:{<provider>:<account>}:pauseby  "operator" while Gate.Pause moved the deadline last (expires with it)
//	<prefix>:{<provider>:<account>}:line     the reopening line's next slot, Unix µs (string)
//	<prefix>:{<provider>:<account>}:iline    ... interactive work's (string)
//	<prefix>:{<provider>:<account>}:class    what the scope keeps of its interactive work (hash, ClassFields)
//	<prefix>:{<provider>:<account>}:tat      the first limit's state: GCRA TAT, Unix µs (string)
//	<prefix>:{<provider>:<account>}:win      ... or, for a fixed window, its counts (hash)
//	<prefix>:{<provider>:<account>}:slog     ... or, for a sliding window, its log (sorted set)
//	<prefix>:{<provider>:<account>}:conc     ... or, for a concurrency limit, its leases (sorted set)
//	<prefix>:{<provider>:<account>}:tat2 …   the second limit's state, and so on
//	<prefix>:{<provider>:<account>}:budget   the advertised budget (hash, BudgetFields)
//	<prefix>:{<provider>:<account>}:learn    what refusals taught (hash, LearnFields)
//	<prefix>:{<provider>:<account>}:lwin     the learned limit's counts (hash)
//	<prefix>:{<provider>:<account>}:llog     the learned limit's log, when it is one (sorted set, as slog)
//	<prefix>:{<provider>:<account>}:fallback the hintless pause's episode (hash, FallbackFields)
//	<prefix>:{<provider>:<account>}:start    the slow start of a silent provider (hash, StartFields)
//	<prefix>:{<provider>:<account>}:flight   the learned concurrency limit (hash, FlightFields)
//	<prefix>:{<provider>:<account>}:fconc    its leases (sorted set, as conc)
//	<prefix>:{<provider>:<account>}:resumed  the Redis TIME (Unix ms) of the last Resume (expires MaxPause after it)
//
// A window count hash has one field per window, named by its start (Unix
// µs), and FieldOrigin (Unix µs) while its windows are not aligned. A
// sliding log has one member per admission, "<instant>:<j>" scored by the
// instant (Unix µs; j tells apart the admissions of one instant). A
// concurrency limit's set has one member per lease, "<cost>:<id>" scored
// by its expiry (Unix µs). Every instant in the hashes is Unix µs of Redis
// TIME; every record states when it is over (a deadline, an expires field,
// the last window), and its key expires a margin after that instant:
// expiry only collects what the values already say is over.
//
// Provider and account are escaped so that neither can end the hash tag or
// make two scopes collide: '%', ':', '{' and '}' become %25, %3A, %7B, %7D.
package schema

import (
	"hash/crc32"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// BudgetFields are the fields of the budget hash, as the model's
// budgetState names them.
var BudgetFields = []string{"remaining", "reset", "limit", "seq", "refilled", "probeAt", "silent", "expires", "per", "at", "dist", "distSeq",
	"window", "first", "held", "down", "answered", "millis"}

// LearnFields are the fields of the learned hash, as learnState names
// them.
var LearnFields = []string{"limit", "window", "best", "since", "admits", "alignAt", "alignPrec", "absorb", "refused", "probeAt", "frozen", "secondary", "paced", "expires"}

// ClassFields are the fields of the class hash, as classState names them.
var ClassFields = []string{"seen", "claims", "claimed"}

// FallbackFields are the fields of the fallback hash, as fallbackState
// names them.
var FallbackFields = []string{"level", "probeAt", "expires"}

// StartFields are the fields of the start hash, as startState names them.
var StartFields = []string{"began", "last", "sent", "answered", "run", "along", "most", "over", "expires"}

// FlightFields are the fields of the flight hash, as flightState names
// them.
var FlightFields = []string{"limit", "phase", "since", "sent", "acks", "answered", "before", "last", "full", "frozen", "admitted", "expires", "held", "raised", "grown"}

// FieldOrigin names the origin of unaligned windows in a count hash.
const FieldOrigin = "origin"

// RecordVersion is the format of a scope's record hashes (those whose
// fields BudgetFields, LearnFields, ClassFields, FallbackFields,
// StartFields and FlightFields name), which every save writes in the
// field FieldVersion. A gate reads a record of its own version, or one
// without the field (written before records carried it, in version 1's
// format); a record of a newer version is another release's: the gate
// neither reads nor writes it, and holds the scope closed until the record
// expires (see docs/design.md, Compatibility). A release that changes what
// a field of a record means, or drops one, raises it; adding a field an
// older gate may ignore does not.
const RecordVersion = 1

// FieldVersion names the format version of a record hash (RecordVersion).
const FieldVersion = "v"

// Keys are the Redis keys of one scope.
type Keys struct {
	Base                                               string // "<prefix>:{<provider>:<account>}:", which every key starts with
	Pause, PauseBy, Tat, Line, Budget, Learn, LearnWin string
	ILine, Class, Resumed, Fallback, LearnLog, Start   string
	Flight, FlightConc                                 string // the learned concurrency limit and its leases
}

var (
	keyEscaper   = strings.NewReplacer("%", "%25", ":", "%3A", "{", "%7B", "}", "%7D")
	keyUnescaper = strings.NewReplacer("%25", "%", "%3A", ":", "%7B", "{", "%7D", "}")
	globEscaper  = strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`)
)

// ScopeKeys returns the keys of the scope of provider and account under
// prefix.
func ScopeKeys(prefix, provider, account string) Keys {
	return BaseKeys(prefix + ":{" + keyEscaper.Replace(provider) + ":" + keyEscaper.Replace(account) + "}:")
}

// BaseKeys returns the keys of the scope whose keys start with base
// (Keys.Base): its pause key less "pause".
func BaseKeys(base string) Keys {
	return Keys{Base: base, Pause: base + "pause", PauseBy: base + "pauseby", Tat: base + "tat", Line: base + "line",
		Budget: base + "budget", Learn: base + "learn", LearnWin: base + "lwin", ILine: base + "iline", Class: base + "class",
		Resumed: base + "resumed", Fallback: base + "fallback", LearnLog: base + "llog", Start: base + "start",
		Flight: base + "flight", FlightConc: base + "fconc"}
}

// PauseKeys returns the keys of the scope whose pause key (Keys.Pause) is
// pause.
func PauseKeys(pause string) Keys { return BaseKeys(strings.TrimSuffix(pause, "pause")) }

// LimitKind is the kind of a configured limit, which names its key.
type LimitKind int

// The kinds of limit.
const (
	GCRA       LimitKind = iota // a token bucket: its TAT ("tat")
	Fixed                       // a fixed window: its counts ("win")
	Sliding                     // a sliding log ("slog")
	Concurrent                  // leases in flight ("conc")
)

// KindOf is the kind of a limit that is fixed, sliding, concurrent or,
// when none of them, a GCRA bucket.
func KindOf(fixed, sliding, concurrent bool) LimitKind {
	switch {
	case fixed:
		return Fixed
	case sliding:
		return Sliding
	case concurrent:
		return Concurrent
	}
	return GCRA
}

// MaxLimits is how many limits a scope may have configured: the keys of
// its limits are numbered below it, so that Resume finds every one of
// them, whichever gate configured it, without listing the keyspace.
const MaxLimits = 16

// LimitKinds are every kind of limit.
var LimitKinds = []LimitKind{GCRA, Fixed, Sliding, Concurrent}

var limitNames = [...]string{GCRA: "tat", Fixed: "win", Sliding: "slog", Concurrent: "conc"}

// Limit returns the state key of the i-th configured limit (from 0), of
// kind kind: "tat", "win2", "slog3", ...
func (k Keys) Limit(i int, kind LimitKind) string {
	name := limitNames[kind]
	if i > 0 {
		name += strconv.Itoa(i + 1)
	}
	return k.Base + name
}

// Kinds are the kinds of key of one scope that have fixed names, "resumed"
// aside (the note of the last Resume records nothing of the scope); the
// second and further limits add numbered ones (tat2, win3, slog2, conc2,
// ...).
var Kinds = []string{"pause", "pauseby", "tat", "win", "slog", "conc", "line", "iline", "class", "budget", "learn", "lwin", "llog", "fallback", "start", "flight", "fconc"}

// ParsePauseKey returns the provider and account whose pause key under
// prefix is key, as ScopeKeys builds it, and false for any key ScopeKeys
// cannot have written (another prefix or kind, raw ':' or '%' in a field,
// a lowercase or unknown escape).
func ParsePauseKey(prefix, key string) (provider, account string, ok bool) {
	tag, ok := strings.CutPrefix(key, prefix+":{")
	if !ok {
		return "", "", false
	}
	if tag, ok = strings.CutSuffix(tag, "}:pause"); !ok {
		return "", "", false
	}
	p, a, _ := strings.Cut(tag, ":")
	provider, account = keyUnescaper.Replace(p), keyUnescaper.Replace(a)
	if ScopeKeys(prefix, provider, account).Pause != key {
		return "", "", false
	}
	return provider, account, true
}

// waitKind matches the kinds of key whose presence may hold a scope back: a
// pause, a spent budget, a limit's state, the learned limit's windows or log, a
// hintless episode's probe (the learned hash itself does not: every scope
// that was used has one; nor does the start hash: a slow start holds only a
// scope whose silent budget record is there).
var waitKind = regexp.MustCompile(`^(pause|budget|i?line|lwin|llog|fallback|tat[0-9]*|win[0-9]*|slog[0-9]*|conc[0-9]*)$`)

// PauseKeyOfWait returns the pause key of the scope of key when key is of
// a kind whose presence may hold a scope back (a pause, a spent budget, a
// limit's state, the learned limit's windows or log, a hintless episode),
// and false otherwise.
func PauseKeyOfWait(key string) (string, bool) {
	i := strings.LastIndex(key, "}:")
	if i < 0 || !waitKind.MatchString(key[i+2:]) {
		return "", false
	}
	return key[:i+2] + "pause", true
}

// KeyPattern is the SCAN MATCH pattern of every key of every scope under
// prefix.
func KeyPattern(prefix string) string { return globEscaper.Replace(prefix) + ":{*}:*" }

// BasePattern is the SCAN MATCH pattern of every key of the scope whose
// keys start with base (Keys.Base).
func BasePattern(base string) string { return globEscaper.Replace(base) + "*" }

// FeedVersion is the format of the feed's keys and entries
// (internal/feed). An entry carries it; a gate notes only the pauses of
// entries of its own format, and forgets whatever scope any entry names,
// so a gate of another format is never trusted, only asked.
const FeedVersion = 1

// FeedGroups is how many groups the feed spreads the scopes over on a
// Cluster (or a Ring), each group's log and snapshot sharing one hash
// tag: enough for a Cluster to spread the feed over its masters, few
// enough that a gate reads them all in one round trip per master and
// interval. A single node holds one group: a gate reads its log in one
// command. It is part of the format: every gate of one FeedVersion
// agrees on it.
const FeedGroups = 16

// AskRetain is how long a feed group's asks (FeedKeys) keep a scope after
// the last entry that named it, and so how long a process holds it as a
// scope that must ask Redis: longer than any record that may hold a
// scope back lives unwritten (a pause, at most the default MaxPause of 12
// hours; a budget, LearnTTL past its reset). Every gate of one FeedVersion
// agrees on it.
const AskRetain = 25 * time.Hour

// FeedKeys are the keys of group g of the feed under prefix: its log
// (a stream), its snapshot (a sorted set of the pause keys waiting,
// scored by their deadline, Unix ms) and its asks (a sorted set of the
// pause keys an entry named, scored by the entry's time, Unix ms),
// "<prefix>:feed:{v<version>g<g>}:log", ":snap" and ":asks".
func FeedKeys(prefix string, g int) (log, snap, asks string) {
	base := prefix + ":feed:{v" + strconv.Itoa(FeedVersion) + "g" + strconv.Itoa(g) + "}:"
	return base + "log", base + "snap", base + "asks"
}

// FeedGroup is the group, of n, of the feed that carries the scope of
// pause key k: its CRC-32 (IEEE) modulo n.
func FeedGroup(k string, n int) int { return int(crc32.ChecksumIEEE([]byte(k)) % uint32(n)) }

var braceEscaper = strings.NewReplacer("{", "%7B", "}", "%7D")

// Prefix is p made safe as a key prefix: its braces escaped, so that the
// scope's tag stays the hash tag.
func Prefix(p string) string { return braceEscaper.Replace(p) }
