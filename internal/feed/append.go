package feed

import (
	"context"
	"time"

	"github.com/quotagate/quotagate/internal/schema"

	"github.com/redis/go-redis/v9"
)

// Retain is how long a log keeps its entries: a reader that read within
// half of it has missed none, one that did not reloads the snapshot.
// Many times the interval, so that a reader slowed by a busy Redis or a
// short partition catches up from the log; short, so that a log holds a
// minute of pauses, not hours.
const Retain = time.Minute

// Groups is how many groups the feed has on rdb: one on a single node
// (plain or Sentinel's), schema.FeedGroups on a Cluster or a Ring, where
// the groups spread over the nodes.
func Groups(rdb redis.UniversalClient) int {
	if _, single := rdb.(*redis.Client); single {
		return 1
	}
	return schema.FeedGroups
}

// AskRetain is how long a group's asks keep a scope an entry named after
// its last (schema.AskRetain), so that a process that starts, or catches
// up after a gap, asks Redis about every scope that may hold its tasks
// back. A scope whose records the scripts keep writing without any entry
// for longer (a learned limit in use a whole day without a refusal) is
// admitted without a round trip by the processes that start after that,
// until the provider's next refusal, which is announced.
const AskRetain = schema.AskRetain

// appendScript appends an entry to a group's log and brings its snapshot
// and its asks up to date: a pause raises the scope's score in the
// snapshot to its deadline (never lowers it), a resume removes the scope
// from it, every entry scores the scope in the asks at its time, and
// every append removes the snapshot's scopes whose deadline passed and
// the asks older than AskRetain. The log keeps the entries of the last
// Retain (XADD MINID, by the time of their IDs) and expires Retain after
// the last; the snapshot expires at its last deadline, the asks
// AskRetain after the last entry.
//
// KEYS[1] log  KEYS[2] snapshot  KEYS[3] asks
// ARGV[1] the entry (encode)  ARGV[2] pause key  ARGV[3] deadline, Unix
// ms (0: none)  ARGV[4] resumed ("1" or "0")  ARGV[5] Retain ms
// ARGV[6] AskRetain ms
// returns: the entry's ID
var appendScript = redis.NewScript(`
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local retain, askRetain = tonumber(ARGV[5]), tonumber(ARGV[6])
local id = redis.call('XADD', KEYS[1], 'MINID', '~', string.format('%.0f', now_ms - retain), '*', 'e', ARGV[1])
redis.call('PEXPIRE', KEYS[1], retain)
if ARGV[4] == '1' then
  redis.call('ZREM', KEYS[2], ARGV[2])
elseif ARGV[3] ~= '0' then
  local old = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[2]) or '0')
  if tonumber(ARGV[3]) > old then redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2]) end
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', string.format('%.0f', now_ms))
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
if last[2] then redis.call('PEXPIREAT', KEYS[2], last[2]) end
redis.call('ZADD', KEYS[3], string.format('%.0f', now_ms), ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. string.format('%.0f', now_ms - askRetain))
redis.call('PEXPIRE', KEYS[3], askRetain)
return id
`)

// Append writes e (its Version ignored: this package's is written) to
// the log of its group under prefix.
func Append(ctx context.Context, rdb redis.UniversalClient, prefix string, e Entry) error {
	script, keys, args := AppendCall(rdb, prefix, e)
	return script.Run(ctx, rdb, keys, args...).Err()
}

// AppendCall is Append's script, keys and arguments, for a caller that
// runs it another way (the store, which WAITs for replicas when asked
// to: quotagate's Config.Durable). The keys share one slot.
func AppendCall(rdb redis.UniversalClient, prefix string, e Entry) (*redis.Script, []string, []any) {
	log, snap, asks := schema.FeedKeys(prefix, schema.FeedGroup(e.Key, Groups(rdb)))
	resumed := "0"
	if e.Resumed {
		resumed = "1"
	}
	return appendScript, []string{log, snap, asks}, []any{encode(e), e.Key, e.UntilMs, resumed, Retain.Milliseconds(), AskRetain.Milliseconds()}
}
