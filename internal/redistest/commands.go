package redistest

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Commands is a go-redis hook that counts the commands its clients send,
// by lower-case name (each command of a pipeline), for tests that bound
// what a client asks of Redis without timing it:
//
//	sent := redistest.NewCommands()
//	rdb.AddHook(sent) // a ClusterClient's nodes: rdb.OnNewNode(func(n *redis.Client) { n.AddHook(sent) })
//	...
//	scripts := sent.Of("evalsha", "eval")
type Commands struct {
	// Name, when set, names a command as it is counted (to tell apart
	// scripts by what they are); nil: cmd.Name().
	Name func(redis.Cmder) string

	mu sync.Mutex
	n  map[string]int64
}

// NewCommands returns a counter of no command yet.
func NewCommands() *Commands { return &Commands{n: map[string]int64{}} }

// DialHook is go-redis's: the counter leaves dialling alone.
func (c *Commands) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts a command.
func (c *Commands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(cmd)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts each command of a pipeline.
func (c *Commands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.add(cmd)
		}
		return next(ctx, cmds)
	}
}

func (c *Commands) add(cmd redis.Cmder) {
	name := cmd.Name()
	if c.Name != nil {
		name = c.Name(cmd)
	}
	c.mu.Lock()
	c.n[name]++
	c.mu.Unlock()
}

// Of is how many commands of the names were sent.
func (c *Commands) Of(names ...string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for _, name := range names {
		n += c.n[name]
	}
	return n
}

// Total is how many commands were sent, but for those of go-redis's own
// handshake on a new connection (HELLO, CLIENT SETINFO).
func (c *Commands) Total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for name, v := range c.n {
		if name != "hello" && name != "client" {
			n += v
		}
	}
	return n
}
