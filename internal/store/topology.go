package store

// Finding a new master. A go-redis ClusterClient routes a slot to the
// master its cluster state names, and reloads that state only every
// ClusterStateReloadInterval (a minute by default), on a MOVED or ASK
// answer, or on a READONLY one. A killed master answers nothing: its slots'
// commands fail (a refused dial) until the state is reloaded, so without
// help a gate on go-redis's defaults fails open (or closed) on those slots
// for up to a minute after the promotion of the replica. The gate helps: a
// store call that fails with a connection error, a timeout, or an answer
// that says the node is not the slot's master (MOVED, ASK, READONLY,
// CLUSTERDOWN, TRYAGAIN, LOADING, MASTERDOWN) has the client reload its
// state, at most once per clusterReloadEvery. (A Sentinel's failover client
// follows the Sentinel's announcements by itself.)

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterReloadEvery is the least time between two reloads of a cluster
// client's state asked for by the gate's store failures: while a master is
// dead every call of its slots fails, and a reload is a CLUSTER SLOTS (or
// SHARDS) round trip to some node; four a second find a promoted replica
// within a quarter of a second of its promotion at the cost of a round
// trip per 250 ms while the cluster has no master for a slot.
const clusterReloadEvery = 250 * time.Millisecond

// reloader reloads a cluster client's state on store failures.
type reloader struct {
	cc   *redis.ClusterClient
	last atomic.Int64 // Unix ns of the last reload asked for
	now  func() time.Time
}

// newReloader returns the reloader of rdb, nil (which does nothing) when
// rdb is not a cluster client.
func newReloader(rdb redis.UniversalClient) *reloader {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return nil
	}
	return &reloader{cc: cc, now: time.Now}
}

// failed hears a store failure: one that may mean the slot's master moved
// reloads the state, unless a reload was asked for within
// clusterReloadEvery.
func (r *reloader) failed(err error) {
	if r == nil || !topologyError(err) {
		return
	}
	now := r.now().UnixNano()
	last := r.last.Load()
	if now-last < int64(clusterReloadEvery) || !r.last.CompareAndSwap(last, now) {
		return
	}
	r.cc.ReloadState(context.Background()) // asynchronous (go-redis's LazyReload)
}

// topologyError reports whether err may mean the store's layout changed:
// any error that is not an answer of Redis (a refused dial, a reset or
// closed connection, a timeout), or an answer that says the node does not
// serve the slot as its master (see notRun). An error of a script, or a
// caller's cancellation, says nothing of the layout.
func topologyError(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, redis.ErrClosed) {
		return false
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return notRun(err)
	}
	return true
}

// Master is a master that serves some keys: of a cluster client the
// master of their slots (Addr), else the client's one server (Addr "").
type Master struct {
	Addr string
	Keys []string // those of the keys asked about that it serves

	c redis.Cmdable
}

// MasterOf returns the address of the master that serves key as the
// client knows it now, without a call ("" for a client of one server);
// ok is false when a cluster client cannot name it.
func (s *Store) MasterOf(key string) (addr string, ok bool) {
	cc, isCluster := s.rdb.(*redis.ClusterClient)
	if !isCluster {
		return "", true
	}
	n, err := cc.MasterForKey(context.Background(), key)
	if err != nil {
		return "", false
	}
	return n.Options().Addr, true
}

// Masters groups keys by the master that serves them as the client
// knows it now (a cluster client's layout; one server otherwise),
// ordered by address. It makes no call, unless a cluster client has no
// layout yet; err is that of a key whose master it cannot name (the
// others are grouped).
func (s *Store) Masters(ctx context.Context, keys []string) ([]Master, error) {
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		return []Master{{Keys: keys, c: s.rdb}}, nil
	}
	var err error
	by := map[string]*Master{}
	for _, k := range keys {
		n, merr := cc.MasterForKey(ctx, k)
		if merr != nil {
			err = merr
			continue
		}
		a := n.Options().Addr
		if by[a] == nil {
			by[a] = &Master{Addr: a, c: n}
		}
		by[a].Keys = append(by[a].Keys, k)
	}
	out := make([]Master, 0, len(by))
	for _, m := range by {
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b Master) int { return strings.Compare(a.Addr, b.Addr) })
	return out, err
}

// Ping sends one PING to m, bounded and counted as a "state" call. A gate
// that remembers pauses in force pings their masters so that a dead one is
// noticed (and the layout reloaded) whether or not tasks of their scopes
// come by (internal/failover's ProbeEvery).
func (s *Store) Ping(ctx context.Context, m Master) error {
	_, err := bounded(ctx, s, "state", func(ctx context.Context) (string, error) { return m.c.Ping(ctx).Result() })
	return err
}

// Identity returns what tells one life of the master m from another: its
// run_id (a new one at every start of the server) and its replication ID
// (a new one whenever a server becomes a master: the promotion of a
// replica, or a master that was a replica meanwhile), from INFO server and
// INFO replication, one bounded "state" call of two commands. Two answers
// with the same identity come from one master that lost nothing
// acknowledged in between: a write it acknowledged is gone only with the
// process, or with its data set replaced by a master's. The identity is
// "" when m does not tell (a server without these INFO fields, a user
// without the INFO command, a node that is not a master now, a Ring):
// then nothing can be told apart, and no error either.
func (s *Store) Identity(ctx context.Context, m Master) (string, error) {
	if _, ring := m.c.(*redis.Ring); ring { // INFO would answer for one shard of many
		return "", nil
	}
	return bounded(ctx, s, "state", func(ctx context.Context) (string, error) {
		var srv, repl *redis.StringCmd
		_, err := m.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			srv, repl = p.Info(ctx, "server"), p.Info(ctx, "replication")
			return nil
		})
		var rerr redis.Error
		if errors.As(err, &rerr) { // an answer: the server does not tell
			return "", nil
		}
		if err != nil {
			return "", err
		}
		return identity(srv.Val(), repl.Val()), nil
	})
}

// identity is Identity's value from the INFO server and INFO replication
// texts: "<run_id>/<master_replid>" of a master, "" otherwise.
func identity(server, replication string) string {
	field := func(info, name string) string {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
				return v
			}
		}
		return ""
	}
	run, role, repl := field(server, "run_id"), field(replication, "role"), field(replication, "master_replid")
	if run == "" || repl == "" || role != "master" {
		return ""
	}
	return run + "/" + repl
}

// scanCount is the COUNT hint of each SCAN call: how many slots of the
// keyspace Redis walks per call. A thousand keeps each call well under a
// millisecond of server time while a keyspace of a million keys (asynq's
// included) takes a thousand round trips.
const scanCount = 1000

// scanPage is one SCAN reply.
type scanPage struct {
	keys []string
	next uint64
}

// Scan walks the keys that match pattern with SCAN (never KEYS) on every
// master of a cluster client (every shard of a ring; the one server
// otherwise), each call bounded and counted as a "scan" call, and hands
// every page of keys to add until add reports false. add may be called
// from several goroutines at once (a cluster's masters are walked in
// parallel).
func (s *Store) Scan(ctx context.Context, pattern string, add func(keys []string) bool) error {
	scan := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for {
			page, err := bounded(ctx, s, "scan", func(ctx context.Context) (scanPage, error) {
				keys, next, err := c.Scan(ctx, cursor, pattern, scanCount).Result()
				return scanPage{keys, next}, err
			})
			if err != nil {
				return err
			}
			if !add(page.keys) || page.next == 0 {
				return nil
			}
			cursor = page.next
		}
	}
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return scan(ctx, node) })
	case *redis.Ring:
		return c.ForEachShard(ctx, func(ctx context.Context, shard *redis.Client) error { return scan(ctx, shard) })
	}
	return scan(ctx, s.rdb)
}
