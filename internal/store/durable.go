package store

// Durable writes: a script whose effect must survive the loss of the
// master that ran it.
//
// Redis replicates asynchronously: a master answers a script before any
// replica has its effect, and a master that dies in between takes the
// effect with it when its replica is promoted. WAIT numreplicas timeout
// blocks the connection that sent it until that many replicas have
// acknowledged every write the connection made, or until the timeout, and
// answers how many did. Inside a script WAIT does not block (it answers at
// once), so it has to follow the script on the same connection: here, in a
// pipeline of two commands on one node's client, the master that owns the
// script's slot.
//
// The cost is one more reply in the same round trip, plus the time the
// replica takes to acknowledge (a REPLCONF GETACK exchange, sent by the
// master as soon as a client waits): on loopback tens of microseconds,
// across a network one more round trip to the replica.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// errNotReplicated is matched (errors.Is) by the error of runDurably when
// the script ran but fewer replicas than asked acknowledged it within the
// timeout; errors.As with *notReplicatedError gives the counts. The write
// is in force on the master: it is only not known to survive its loss.
var errNotReplicated = errors.New("quotagate: write not acknowledged by enough replicas")

// notReplicatedError is runDurably's error when the script ran and fewer
// than Want replicas acknowledged it within Timeout.
type notReplicatedError struct {
	Acked, Want int
	Timeout     time.Duration
	Addr        string // the master that ran the script
}

func (e *notReplicatedError) Error() string {
	return fmt.Sprintf("quotagate: write on %s acknowledged by %d of %d replicas within %v", e.Addr, e.Acked, e.Want, e.Timeout)
}

func (e *notReplicatedError) Unwrap() error { return errNotReplicated }

// durableAttempts bounds how many times runDurably sends the script when
// the node answers that it did not run it (it moved, is read-only, or the
// cluster is down during a failover); durableBackoff is the pause before
// the second attempt, doubled for each one after.
const (
	durableAttempts = 4
	durableBackoff  = 25 * time.Millisecond
)

// runDurably runs script with keys and args on the master that owns
// routeKey's slot and then, on the same connection, WAIT replicas timeout.
// It returns the script's reply, how many replicas acknowledged the write
// (which may exceed replicas: WAIT counts all that did), and:
//   - nil when at least replicas acknowledged;
//   - an error matching errNotReplicated (a *notReplicatedError) when the
//     script ran but fewer acknowledged within timeout: the write is on the
//     master, not known to be on a replica (after a master's loss its
//     promoted replica has no replica of its own until one is added, and
//     every durable write then ends so);
//   - the script's or the connection's error otherwise.
//
// The node: for a *redis.ClusterClient the master of routeKey's slot
// (MasterForKey), so routeKey must share the slot of keys (one hash tag);
// for a *redis.Client (a plain client, or a failover client of a Sentinel)
// the client itself, whose pipeline runs on one connection. Other clients
// (a Ring) are refused: a keyless WAIT could land on another shard.
//
// When the node answers that it did not run the script (MOVED, ASK,
// READONLY, CLUSTERDOWN, TRYAGAIN, LOADING, MASTERDOWN, a refused dial: the
// master moved or is being replaced), runDurably asks a cluster client to
// reload its layout and tries again, up to durableAttempts sends in all,
// within ctx. A lost reply is retried by go-redis itself (MaxRetries): the
// script must be idempotent (an atomic max is).
//
// timeout must be positive (WAIT 0 waits forever; it is raised to 1 ms)
// and below the node client's ReadTimeout, which bounds the pipeline's
// read: a longer WAIT would end in an i/o timeout, so it is refused.
// replicas below 1 runs the script alone and reports 0 acknowledgements.
func runDurably(ctx context.Context, rdb redis.UniversalClient, routeKey string, replicas int, timeout time.Duration, script *redis.Script, keys []string, args ...any) (reply any, acked int, err error) {
	timeout = max(timeout, time.Millisecond)
	backoff := durableBackoff
	for attempt := 1; ; attempt++ {
		reply, acked, err = runDurablyOnce(ctx, rdb, routeKey, replicas, timeout, script, keys, args)
		if err == nil || !notRun(err) || attempt == durableAttempts {
			return reply, acked, err
		}
		if cc, ok := rdb.(*redis.ClusterClient); ok {
			cc.ReloadState(ctx)
		}
		select {
		case <-ctx.Done():
			return nil, 0, errors.Join(err, ctx.Err())
		case <-time.After(backoff):
		}
		backoff *= 2
	}
}

// loadedScripts are the scripts known loaded on a node ("addr sha"), so
// that runDurably loads each once per node (a failover's new master is
// another address, or answers NOSCRIPT once).
var loadedScripts scriptSet

type scriptSet struct{ m sync.Map }

func (s *scriptSet) has(id string) bool { _, ok := s.m.Load(id); return ok }
func (s *scriptSet) add(id string)      { s.m.Store(id, struct{}{}) }

// runDurablyOnce is one send of runDurably.
func runDurablyOnce(ctx context.Context, rdb redis.UniversalClient, routeKey string, replicas int, timeout time.Duration, script *redis.Script, keys []string, args []any) (any, int, error) {
	var node *redis.Client
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		m, err := c.MasterForKey(ctx, routeKey)
		if err != nil {
			return nil, 0, err
		}
		node = m
	case *redis.Client:
		node = c
	default:
		return nil, 0, fmt.Errorf("quotagate: durable writes need a *redis.Client or *redis.ClusterClient, not a %T", rdb)
	}
	if replicas < 1 {
		v, err := script.Run(ctx, node, keys, args...).Result()
		return v, 0, err
	}
	if rt := node.Options().ReadTimeout; rt > 0 && timeout >= rt {
		return nil, 0, fmt.Errorf("quotagate: a WAIT of %v needs a client ReadTimeout above it (it is %v)", timeout, rt)
	}
	// Load the script on the node first, once: a NOSCRIPT answer in the
	// pipeline would cost a whole WAIT before the script could run.
	if id := node.Options().Addr + " " + script.Hash(); !loadedScripts.has(id) {
		if err := script.Load(ctx, node).Err(); err != nil {
			return nil, 0, err
		}
		loadedScripts.add(id)
	}

	// Pipeliner has no Wait (go-redis keeps blocking commands out of
	// pipelines); Do sends it as it is. Its reply is read within the
	// client's ReadTimeout (checked above).
	run := func(eval func(redis.Pipeliner) *redis.Cmd) (*redis.Cmd, *redis.Cmd, error) {
		pipe := node.Pipeline()
		ev := eval(pipe)
		wait := pipe.Do(ctx, "wait", replicas, timeout.Milliseconds())
		_, err := pipe.Exec(ctx)
		return ev, wait, err
	}
	ev, wait, _ := run(func(p redis.Pipeliner) *redis.Cmd { return script.EvalSha(ctx, p, keys, args...) })
	if redis.HasErrorPrefix(ev.Err(), "NOSCRIPT") {
		ev, wait, _ = run(func(p redis.Pipeliner) *redis.Cmd { return script.Eval(ctx, p, keys, args...) })
	}
	v, err := ev.Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, 0, err
	}
	n, werr := wait.Int()
	if werr != nil {
		return v, 0, fmt.Errorf("quotagate: WAIT after the script on %s: %w", node.Options().Addr, werr)
	}
	if int(n) < replicas {
		return v, int(n), &notReplicatedError{Acked: int(n), Want: replicas, Timeout: timeout, Addr: node.Options().Addr}
	}
	return v, int(n), nil
}

// notRun reports whether err says the script was not run: a redirect, a
// read-only or loading node, a cluster or master down, or a dial refused.
func notRun(err error) bool {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		for _, p := range []string{"MOVED ", "ASK ", "READONLY ", "CLUSTERDOWN ", "TRYAGAIN ", "LOADING ", "MASTERDOWN "} {
			if redis.HasErrorPrefix(err, p) {
				return true
			}
		}
		return false
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
