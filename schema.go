package quotagate

import (
	"regexp"
	"strconv"
	"strings"
)

// The schema: the Redis keys of one scope and the fields of its hashes,
// named in one place for Go and Lua alike.
//
//	<prefix>:{<provider>:<account>}:pause    the pause deadline, Unix ms (string; expires at it)
//	<prefix>:{<provider>:<account>}:pauseby  "operator" while Gate.Pause moved the deadline last (expires with it)
//	<prefix>:{<provider>:<account>}:line     the reopening line's next slot, Unix µs (string)
//	<prefix>:{<provider>:<account>}:iline    ... interactive work's (string)
//	<prefix>:{<provider>:<account>}:class    what the scope keeps of its interactive work (hash, classFields)
//	<prefix>:{<provider>:<account>}:tat      the first limit's state: GCRA TAT, Unix µs (string)
//	<prefix>:{<provider>:<account>}:win      ... or, for a fixed window, its counts (hash)
//	<prefix>:{<provider>:<account>}:slog     ... or, for a sliding window, its log (sorted set)
//	<prefix>:{<provider>:<account>}:conc     ... or, for a concurrency limit, its leases (sorted set)
//	<prefix>:{<provider>:<account>}:tat2 …   the second limit's state, and so on
//	<prefix>:{<provider>:<account>}:budget   the advertised budget (hash, budgetFields)
//	<prefix>:{<provider>:<account>}:learn    what refusals taught (hash, learnFields)
//	<prefix>:{<provider>:<account>}:lwin     the learned limit's counts (hash)
//	<prefix>:{<provider>:<account>}:llog     the learned limit's log, when it is one (sorted set, as slog)
//	<prefix>:{<provider>:<account>}:fallback the hintless pause's episode (hash, fallbackFields)
//	<prefix>:{<provider>:<account>}:resumed  the Redis TIME (Unix ms) of the last Resume (expires MaxPause after it)
//
// A window count hash has one field per window, named by its start (Unix
// µs), and "origin" (Unix µs) while its windows are not aligned. A
// sliding log has one member per admission, "<instant>:<j>" scored by the
// instant (Unix µs; j tells apart the admissions of one instant). A
// concurrency limit's set has one member per lease, "<cost>:<id>" scored
// by its expiry (Unix µs). Every
// instant in the hashes is Unix µs of Redis TIME; every record states
// when it is over (a deadline, an expires field, the last window), and its
// key expires a margin after that instant: expiry only collects what the
// values already say is over.
//
// Provider and account are escaped so that neither can end the hash tag or
// make two scopes collide: '%', ':', '{' and '}' become %25, %3A, %7B, %7D.

// budgetFields are the fields of the budget hash, as budgetState names
// them: remaining (absent: nothing advertised), reset, limit, seq,
// refilled, probeAt, silent (1: the provider advertises nothing), expires,
// per, at, dist, distSeq (a budget that refills before its reset),
// window, first, held (1; a sliding window counter's budget), down (1: the
// provider writes its resets rounded down), answered (readings since the
// last probe: budgetState.above), millis (1: the provider writes its resets
// in milliseconds under a name of seconds: budgetState.readsMillis).
var budgetFields = []string{"remaining", "reset", "limit", "seq", "refilled", "probeAt", "silent", "expires", "per", "at", "dist", "distSeq",
	"window", "first", "held", "down", "answered", "millis"}

// learnFields are the fields of the learned hash, as learnState names
// them.
var learnFields = []string{"limit", "window", "best", "since", "admits", "alignAt", "alignPrec", "absorb", "refused", "probeAt", "frozen", "secondary", "paced", "expires"}

// classFields are the fields of the class hash, as classState names them:
// seen, claims, claimed.
var classFields = []string{"seen", "claims", "claimed"}

// fallbackFields are the fields of the fallback hash, as fallbackState
// names them: level, probeAt, expires.
var fallbackFields = []string{"level", "probeAt", "expires"}

// startFields are the fields of the start hash, as startState names them:
// began, last, sent, answered, over (1), expires.
var startFields = []string{"began", "last", "sent", "answered", "over", "expires"}

// luaHash is the load and save of a record hash: hrecord reads fields
// (integers, 0 when absent or malformed) into a record of key, every field
// 0 when its expires has passed (a record past it is none); hsave writes
// the fields of R (a boolean as 1 or 0), all but skip, to R.key, expiring a
// margin after R.expires (µs); a record whose expires is 0 is deleted.
const luaHash = `
local function hrecord(key, fields)
  local v = hload(key, fields)
  local R = {key = key}
  for _, f in ipairs(fields) do R[f] = int(v[f]) or 0 end
  if R.expires <= now_us then
    for _, f in ipairs(fields) do R[f] = 0 end
  end
  return R
end
local function hsave(R, fields, skip)
  redis.call('DEL', R.key)
  if R.expires == 0 then return end
  local args = {}
  for _, f in ipairs(fields) do
    local v = R[f]
    if type(v) == 'boolean' then v = v and 1 or 0 end
    if f ~= skip then args[#args + 1] = f; args[#args + 1] = num(v) end
  end
  redis.call('HSET', R.key, unpack(args))
  redis.call('PEXPIREAT', R.key, math.ceil(R.expires / 1000) + C.margin)
end
`

// fieldOrigin names the origin of unaligned windows in a count hash.
const fieldOrigin = "origin"

// keys are the Redis keys of one scope. Every key of a scope shares one
// hash tag built from the scope, so multi-key scripts stay Redis Cluster
// safe, while different scopes spread over slots.
type keys struct {
	base                                               string
	pause, pauseBy, tat, line, budget, learn, learnWin string
	iline, class, resumed, fallback, learnLog, start   string
}

var (
	keyEscaper   = strings.NewReplacer("%", "%25", ":", "%3A", "{", "%7B", "}", "%7D")
	braceEscaper = strings.NewReplacer("{", "%7B", "}", "%7D")
)

func scopeKeys(prefix string, s Scope) keys {
	base := prefix + ":{" + keyEscaper.Replace(s.Provider) + ":" + keyEscaper.Replace(s.Account) + "}:"
	return keys{base: base, pause: base + "pause", pauseBy: base + "pauseby", tat: base + "tat", line: base + "line",
		budget: base + "budget", learn: base + "learn", learnWin: base + "lwin", iline: base + "iline", class: base + "class",
		resumed: base + "resumed", fallback: base + "fallback", learnLog: base + "llog", start: base + "start"}
}

// limit returns the state key of the i-th limit l of the scope.
func (k keys) limit(i int, l Limit) string {
	name := "tat"
	if l.Fixed {
		name = "win"
	} else if l.Sliding {
		name = "slog"
	} else if l.Concurrent {
		name = "conc"
	}
	if i > 0 {
		name += strconv.Itoa(i + 1)
	}
	return k.base + name
}

// keyUnescaper reverses keyEscaper.
var keyUnescaper = strings.NewReplacer("%25", "%", "%3A", ":", "%7B", "{", "%7D", "}")

// scopeOfPauseKey is the exact inverse of scopeKeys(prefix, s).pause: it
// returns the valid scope whose pause key under prefix is key, and false for
// any key scopeKeys cannot have written (another prefix or kind, raw ':' or
// '%' in a field, a lowercase or unknown escape, an invalid scope).
func scopeOfPauseKey(prefix, key string) (Scope, bool) {
	tag, ok := strings.CutPrefix(key, prefix+":{")
	if !ok {
		return Scope{}, false
	}
	if tag, ok = strings.CutSuffix(tag, "}:pause"); !ok {
		return Scope{}, false
	}
	p, a, _ := strings.Cut(tag, ":")
	s := Scope{Provider: keyUnescaper.Replace(p), Account: keyUnescaper.Replace(a)}
	if s.Validate() != nil || scopeKeys(prefix, s).pause != key {
		return Scope{}, false
	}
	return s, true
}

// waitKind matches the kinds of key whose presence may hold a scope back: a
// pause, a spent budget, a limit's state, the learned limit's windows or log, a
// hintless episode's probe (the learned hash itself does not: every scope
// that was used has one; nor does the start hash: a slow start holds only a
// scope whose silent budget record is there).
var waitKind = regexp.MustCompile(`^(pause|budget|i?line|lwin|llog|fallback|tat[0-9]*|win[0-9]*|slog[0-9]*|conc[0-9]*)$`)

// scopeOfWaitKey returns the scope of a key of one of waitKinds under
// prefix, as scopeOfPauseKey does for pause keys.
func scopeOfWaitKey(prefix, key string) (Scope, bool) {
	i := strings.LastIndex(key, "}:")
	if i < 0 || !waitKind.MatchString(key[i+2:]) {
		return Scope{}, false
	}
	return scopeOfPauseKey(prefix, key[:i+2]+"pause")
}

// scopeKeyPattern is the SCAN MATCH pattern of every key of every scope
// under prefix.
func scopeKeyPattern(prefix string) string { return globEscaper.Replace(prefix) + ":{*}:*" }

// globEscaper quotes the characters special to Redis's MATCH patterns.
var globEscaper = strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`)
