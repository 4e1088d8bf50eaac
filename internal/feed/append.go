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
// few seconds of pauses, not hours.
const Retain = time.Minute

// appendScript appends an entry to a group's log and brings its snapshot
// up to date: a pause raises the scope's score to its deadline (never
// lowers it), a resume removes the scope, and every append removes the
// scopes whose deadline passed. The log expires Retain after the last
// append, the snapshot at its last deadline.
//
// KEYS[1] log  KEYS[2] snapshot
// ARGV[1] version  ARGV[2] pause key  ARGV[3] deadline, Unix ms (0: none)
// ARGV[4] the Redis TIME it was set at, ms  ARGV[5] resumed ("1" or "0")
// ARGV[6] Retain ms
// returns: the entry's ID
var appendScript = redis.NewScript(`
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local retain = tonumber(ARGV[6])
local fields = {'v', ARGV[1], 'k', ARGV[2]}
if ARGV[3] ~= '0' then fields[#fields + 1] = 'u'; fields[#fields + 1] = ARGV[3]; fields[#fields + 1] = 'n'; fields[#fields + 1] = ARGV[4] end
if ARGV[5] == '1' then fields[#fields + 1] = 'r'; fields[#fields + 1] = '1' end
local id = redis.call('XADD', KEYS[1], 'MINID', '~', string.format('%.0f', now_ms - retain), '*', unpack(fields))
redis.call('PEXPIRE', KEYS[1], retain)
if ARGV[5] == '1' then
  redis.call('ZREM', KEYS[2], ARGV[2])
elseif ARGV[3] ~= '0' then
  local old = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[2]) or '0')
  if tonumber(ARGV[3]) > old then redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2]) end
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', string.format('%.0f', now_ms))
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
if last[2] then redis.call('PEXPIREAT', KEYS[2], last[2]) end
return id
`)

// Append writes e (its Version ignored: this package's is written) to
// the log of its group under prefix.
func Append(ctx context.Context, rdb redis.Scripter, prefix string, e Entry) error {
	log, snap := schema.FeedKeys(prefix, schema.FeedGroup(e.Key))
	resumed := "0"
	if e.Resumed {
		resumed = "1"
	}
	return appendScript.Run(ctx, rdb, []string{log, snap}, schema.FeedVersion, e.Key, e.UntilMs, e.NowMs, resumed,
		Retain.Milliseconds()).Err()
}
