package redistest

// Failover: a Redis Cluster with one replica per master and a
// Sentinel-managed primary with one replica, both private to the test that
// starts them (it may kill their masters), with failure detection fast
// enough for tests: a killed master is replaced by its replica within a few
// seconds. The shared servers of [Main] are never failed over.
//
// Clock: Redis replicates expiry as absolute times. A key written with a
// relative TTL (SET PX, PEXPIRE, or a script's PEXPIRE) reaches the replica
// as PEXPIREAT / PXAT of the master's clock (Redis 7 rewrites it so), and
// a full resynchronisation carries the same absolute instants in the RDB.
// After a promotion, expiry and TIME follow the new master's clock: a
// deadline stored as an absolute instant (quotagate's pause) ends when the
// new master's clock reaches it. If that clock runs ahead of the dead
// master's by δ, every pause in force ends δ early (and a pause shorter
// than δ is gone at once); if it runs behind, pauses last δ longer. On one
// machine (these tests) every node shares the kernel's clock, so the skew
// is zero unless a node is given a clock of its own: [SkewedClock], with
// [StartSentinelWith]'s ReplicaEnv (skew.go).

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// FailoverNodeTimeout is the cluster-node-timeout of a replicated
	// cluster: how long a master may be silent before its replica takes
	// over (plus the election's half second or so). Low enough to keep the
	// tests short, high enough that a loaded 2-core machine does not fail
	// a master over by itself.
	FailoverNodeTimeout = 1500 * time.Millisecond
	// SentinelDownAfter is the Sentinel's down-after-milliseconds: how long
	// the primary may be silent before the Sentinel fails it over.
	SentinelDownAfter = 1000 * time.Millisecond
	// SentinelMasterName is the name the Sentinel monitors the primary by.
	SentinelMasterName = "qgprimary"

	// ReplicatedReload is how often the clients of [Cluster.Client] reload
	// a replicated cluster's layout (ClusterStateReloadInterval).
	ReplicatedReload = time.Second

	// failoverTimeout bounds a failover (a kill's detection, the election,
	// the promotion) and the wait until every node agrees on it.
	failoverTimeout = 45 * time.Second
)

// StartReplicatedCluster starts a Redis Cluster of ClusterMasters masters,
// each with one replica (2×ClusterMasters cluster-enabled redis-servers on
// free loopback ports, joined with redis-cli --cluster create
// --cluster-replicas 1), private to the test even under [Main] and stopped
// by tb.Cleanup. A replica takes over a master that is silent for
// FailoverNodeTimeout, however long it was itself disconnected
// (cluster-replica-validity-factor 0). It returns once every node sees the
// whole cluster ok and every replica is in sync with its master. It skips
// or fails like [Start] when redis-server or redis-cli is missing.
func StartReplicatedCluster(tb testing.TB) *Cluster {
	tb.Helper()
	server, cli := lookPath(tb, Binary), lookPath(tb, CLI)
	dir := tb.TempDir()
	c := &Cluster{replicated: true}
	tb.Cleanup(c.stop)
	for i := range 2 * ClusterMasters {
		nodeDir := filepath.Join(dir, "node"+strconv.Itoa(i))
		if err := os.Mkdir(nodeDir, 0o700); err != nil {
			tb.Fatal(err)
		}
		n, err := startServerWith(server, true, func(port int) ([]string, error) {
			return append(serverArgs(port, nodeDir, true),
				"--cluster-node-timeout", strconv.Itoa(int(FailoverNodeTimeout/time.Millisecond)),
				"--cluster-replica-validity-factor", "0",
			), nil
		})
		if err != nil {
			tb.Fatalf("redistest: replicated cluster node %d: %v", i, err)
		}
		n.private = true
		c.nodes = append(c.nodes, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterReadyTimeout)
	defer cancel()
	args := []string{"--cluster", "create"}
	for _, n := range c.nodes {
		args = append(args, n.Addr)
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		tb.Fatalf("redistest: %s %s: %v; output:\n%s", CLI, strings.Join(args, " "), err, out)
	}
	for _, n := range c.nodes {
		if err := waitClusterNodesOK(ctx, n.Addr, len(c.nodes)); err != nil {
			tb.Fatalf("redistest: %v", err)
		}
	}
	var topo []clusterNode
	if err := poll(ctx, func() (bool, string) {
		var err error
		if topo, err = c.view(ctx, c.nodes[0].Addr); err != nil {
			return false, err.Error()
		}
		return synced(ctx, topo)
	}); err != nil {
		tb.Fatalf("redistest: replicated cluster not in sync after %v: %v", clusterReadyTimeout, err)
	}
	for _, n := range topo {
		if n.master {
			c.Addrs = append(c.Addrs, n.addr)
		} else {
			c.Replicas = append(c.Replicas, n.addr)
		}
	}
	return c
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr string
	master   bool
	failed   bool   // flagged fail or fail? by the node asked
	masterID string // of a replica
	slots    int    // how many slots a master serves
}

// view returns the cluster's nodes as the node at addr sees them.
func (c *Cluster) view(ctx context.Context, addr string) ([]clusterNode, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 1, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer rdb.Close()
	text, err := rdb.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER NODES on %s: %w", addr, err)
	}
	var nodes []clusterNode
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		a, _, _ := strings.Cut(f[1], "@")
		n := clusterNode{id: f[0], addr: a, masterID: f[3]}
		for flag := range strings.SplitSeq(f[2], ",") {
			switch flag {
			case "master":
				n.master = true
			case "fail", "fail?":
				n.failed = true
			}
		}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue // a slot being migrated
			}
			lo, hi, isRange := strings.Cut(r, "-")
			if !isRange {
				hi = lo
			}
			l, err1 := strconv.Atoi(lo)
			h, err2 := strconv.Atoi(hi)
			if err1 == nil && err2 == nil {
				n.slots += h - l + 1
			}
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// synced reports whether, in topo, every master that serves slots is up
// and has a replica that is up and in sync with it (per the replica's INFO
// replication), with what is missing if not.
func synced(ctx context.Context, topo []clusterNode) (bool, string) {
	byID := map[string]clusterNode{}
	for _, n := range topo {
		byID[n.id] = n
	}
	for _, m := range topo {
		if !m.master || m.slots == 0 {
			continue
		}
		if m.failed {
			return false, "master " + m.addr + " is failed"
		}
		ok := false
		for _, r := range topo {
			if r.master || r.masterID != m.id || r.failed {
				continue
			}
			if up, why := replicaUp(ctx, r.addr, m.addr); !up {
				return false, why
			}
			ok = true
		}
		if !ok {
			return false, "master " + m.addr + " has no replica"
		}
	}
	return true, ""
}

// replicaUp reports whether the server at addr is a replica of master with
// its link up and no sync in progress.
func replicaUp(ctx context.Context, addr, master string) (bool, string) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 1, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer rdb.Close()
	info, err := rdb.Info(ctx, "replication").Result()
	if err != nil {
		return false, fmt.Sprintf("INFO replication on %s: %v", addr, err)
	}
	f := ParseInfo(info)
	if got := f["master_host"] + ":" + f["master_port"]; f["role"] != "slave" || got != master ||
		f["master_link_status"] != "up" || f["master_sync_in_progress"] != "0" {
		return false, fmt.Sprintf("%s: role:%s master %s (want %s) master_link_status:%s master_sync_in_progress:%s",
			addr, f["role"], got, master, f["master_link_status"], f["master_sync_in_progress"])
	}
	return true, ""
}

// poll calls cond every 50 ms until it holds or ctx ends; then the error
// carries cond's last word on what is missing.
func poll(ctx context.Context, cond func() (bool, string)) error {
	for {
		ok, why := cond()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s", ctx.Err(), why)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// node returns the server of c at addr, failing the test if c has none.
func (c *Cluster) node(tb testing.TB, addr string) *Server {
	tb.Helper()
	for _, n := range c.nodes {
		if n.Addr == addr {
			return n
		}
	}
	tb.Fatalf("redistest: no node of the cluster at %s", addr)
	return nil
}

// mustReplicated fails the test unless c came from StartReplicatedCluster.
func (c *Cluster) mustReplicated(tb testing.TB, op string) {
	tb.Helper()
	if !c.replicated {
		tb.Fatalf("redistest: %s: only a replicated cluster of the test's own (StartReplicatedCluster) fails over", op)
	}
}

// liveView returns the topology as a live node sees it, and that node.
func (c *Cluster) liveView(ctx context.Context) ([]clusterNode, string, error) {
	var err error
	for _, n := range c.nodes {
		if n.exited() {
			continue
		}
		var topo []clusterNode
		if topo, err = c.view(ctx, n.Addr); err == nil {
			return topo, n.Addr, nil
		}
	}
	return nil, "", fmt.Errorf("no live node answers CLUSTER NODES: %v", err)
}

// Masters returns the addresses of the masters that serve slots now, as a
// live node sees them.
func (c *Cluster) Masters(tb testing.TB) []string {
	tb.Helper()
	topo, _, err := c.liveView(context.Background())
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	var m []string
	for _, n := range topo {
		if n.master && n.slots > 0 && !n.failed {
			m = append(m, n.addr)
		}
	}
	return m
}

// ReplicaOf returns the address of a live replica of the master at addr.
func (c *Cluster) ReplicaOf(tb testing.TB, addr string) string {
	tb.Helper()
	topo, _, err := c.liveView(context.Background())
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	id := ""
	for _, n := range topo {
		if n.addr == addr && n.master {
			id = n.id
		}
	}
	for _, n := range topo {
		if id != "" && n.masterID == id && !n.failed && !c.node(tb, n.addr).exited() {
			return n.addr
		}
	}
	tb.Fatalf("redistest: no live replica of master %s in %v", addr, topo)
	return ""
}

// KillMaster ends the master at addr with SIGKILL and waits until its
// replica has been promoted: every live node sees the replica as the
// master of the dead one's slots and reports the cluster ok. It returns
// the promoted replica's address. The dead node stays down (the cluster
// lives on with one master fewer replicas).
func (c *Cluster) KillMaster(tb testing.TB, addr string) string {
	tb.Helper()
	c.mustReplicated(tb, "KillMaster")
	replica := c.ReplicaOf(tb, addr)
	c.node(tb, addr).current().kill()
	c.waitPromoted(tb, replica, addr)
	return replica
}

// Failover promotes the replica of the master at addr with CLUSTER
// FAILOVER (the graceful case: the master stops writes, the replica
// catches up, then takes over), and waits until every node agrees and the
// old master replicates from the new one. It returns the new master.
func (c *Cluster) Failover(tb testing.TB, addr string) string {
	tb.Helper()
	c.mustReplicated(tb, "Failover")
	replica := c.ReplicaOf(tb, addr)
	rdb := redis.NewClient(&redis.Options{Addr: replica, MaxRetries: -1, PoolSize: 1})
	defer rdb.Close()
	if err := rdb.ClusterFailover(context.Background()).Err(); err != nil {
		tb.Fatalf("redistest: CLUSTER FAILOVER on %s: %v", replica, err)
	}
	c.waitPromoted(tb, replica, addr)
	ctx, cancel := context.WithTimeout(context.Background(), failoverTimeout)
	defer cancel()
	if err := poll(ctx, func() (bool, string) { return replicaUp(ctx, addr, replica) }); err != nil {
		tb.Fatalf("redistest: the old master %s does not replicate from %s: %v", addr, replica, err)
	}
	return replica
}

// waitPromoted waits until every live node sees replica as a master with
// slots, and old as no longer a master with slots, and reports the cluster
// ok on all of them.
func (c *Cluster) waitPromoted(tb testing.TB, replica, old string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failoverTimeout)
	defer cancel()
	for _, n := range c.nodes {
		if n.exited() {
			continue
		}
		err := poll(ctx, func() (bool, string) {
			topo, err := c.view(ctx, n.Addr)
			if err != nil {
				return false, err.Error()
			}
			for _, x := range topo {
				if x.addr == replica && !(x.master && x.slots > 0) {
					return false, fmt.Sprintf("%s sees %s not yet master", n.Addr, replica)
				}
				if x.addr == old && x.master && x.slots > 0 {
					return false, fmt.Sprintf("%s sees %s still master", n.Addr, old)
				}
			}
			return true, ""
		})
		if err == nil {
			err = waitClusterNodesOK(ctx, n.Addr, len(c.nodes))
		}
		if err != nil {
			tb.Fatalf("redistest: failover of %s to %s: %v", old, replica, err)
		}
	}
}

// NodeClient returns a client of the single node at addr (no cluster
// redirection), closed by tb.Cleanup. With readOnly every connection sends
// READONLY first, so that a cluster replica answers reads of its master's
// keys instead of redirecting them.
func (c *Cluster) NodeClient(tb testing.TB, addr string, readOnly bool) *redis.Client {
	tb.Helper()
	c.node(tb, addr)
	o := &redis.Options{Addr: addr, MaxRetries: -1}
	if readOnly {
		o.OnConnect = func(ctx context.Context, cn *redis.Conn) error { return cn.ReadOnly(ctx).Err() }
	}
	rdb := redis.NewClient(o)
	tb.Cleanup(func() { rdb.Close() })
	return rdb
}

// Sentinel is a primary redis-server and one replica of it, monitored by
// one Sentinel (redis-server --sentinel) with quorum 1, so that the loss of
// the primary alone fails it over, after SentinelDownAfter. All three
// processes were started by this package on free loopback ports and are
// private to the test.
type Sentinel struct {
	MasterName string   // the name the Sentinel monitors the primary by
	Addrs      []string // the Sentinels' host:port

	nodes     []*Server // the data nodes: the first primary, its replica
	sentinels []*Server
}

// StartSentinel starts a primary, a replica of it and a Sentinel
// monitoring them, private to the test even under [Main] and stopped by
// tb.Cleanup. It returns once the replica is in sync and the Sentinel
// knows it (a failover can choose it). It skips or fails like [Start] when
// redis-server is missing (the Sentinel is redis-server --sentinel: Debian's
// redis-server package ships no redis-sentinel binary, and needs none).
func StartSentinel(tb testing.TB) *Sentinel {
	tb.Helper()
	return StartSentinelWith(tb, SentinelOptions{})
}

// SentinelOptions change how StartSentinelWith starts its servers.
type SentinelOptions struct {
	// ReplicaEnv is added to the environment of the replica's
	// redis-server: SkewedClock's, say, to run it on a clock of its own.
	ReplicaEnv []string
}

// StartSentinelWith is StartSentinel with options.
func StartSentinelWith(tb testing.TB, o SentinelOptions) *Sentinel {
	tb.Helper()
	path := lookPath(tb, Binary)
	dir := tb.TempDir()
	s := &Sentinel{MasterName: SentinelMasterName}
	tb.Cleanup(s.stop)
	for i := range 2 {
		nodeDir := filepath.Join(dir, "node"+strconv.Itoa(i))
		if err := os.Mkdir(nodeDir, 0o700); err != nil {
			tb.Fatal(err)
		}
		var env []string
		if i == 1 {
			env = o.ReplicaEnv
		}
		n, err := startServerEnv(path, false, env, func(port int) ([]string, error) {
			a := serverArgs(port, nodeDir, false)
			if i == 1 {
				h, p, _ := strings.Cut(s.nodes[0].Addr, ":")
				a = append(a, "--replicaof", h, p)
			}
			return a, nil
		})
		if err != nil {
			tb.Fatalf("redistest: sentinel data node %d: %v", i, err)
		}
		n.private = true
		s.nodes = append(s.nodes, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterReadyTimeout)
	defer cancel()
	// The replica is in sync before the Sentinel starts: its first INFO of
	// the primary then lists the replica (the next comes 10 s later).
	if err := poll(ctx, func() (bool, string) { return replicaUp(ctx, s.nodes[1].Addr, s.nodes[0].Addr) }); err != nil {
		tb.Fatalf("redistest: sentinel replica not in sync: %v", err)
	}
	sdir := filepath.Join(dir, "sentinel")
	if err := os.Mkdir(sdir, 0o700); err != nil {
		tb.Fatal(err)
	}
	sn, err := startServerWith(path, false, func(port int) ([]string, error) {
		conf := filepath.Join(sdir, "sentinel-"+strconv.Itoa(port)+".conf")
		h, p, _ := strings.Cut(s.nodes[0].Addr, ":")
		text := strings.Join([]string{
			"port " + strconv.Itoa(port),
			"bind 127.0.0.1",
			"daemonize no",
			"dir " + sdir,
			"loglevel warning",
			fmt.Sprintf("sentinel monitor %s %s %s 1", s.MasterName, h, p),
			fmt.Sprintf("sentinel down-after-milliseconds %s %d", s.MasterName, SentinelDownAfter/time.Millisecond),
			fmt.Sprintf("sentinel failover-timeout %s 10000", s.MasterName),
			fmt.Sprintf("sentinel parallel-syncs %s 1", s.MasterName),
		}, "\n") + "\n"
		// The Sentinel rewrites its configuration file: it must be its own.
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			return nil, err
		}
		return []string{conf, "--sentinel"}, nil
	})
	if err != nil {
		tb.Fatalf("redistest: sentinel: %v", err)
	}
	sn.private = true
	s.sentinels = append(s.sentinels, sn)
	s.Addrs = append(s.Addrs, sn.Addr)
	if err := poll(ctx, func() (bool, string) { return s.knowsReplica(ctx, s.nodes[0].Addr, s.nodes[1].Addr) }); err != nil {
		tb.Fatalf("redistest: the sentinel does not know the replica: %v", err)
	}
	return s
}

// knowsReplica reports whether every Sentinel sees master as the master
// and replica as a healthy replica of it.
func (s *Sentinel) knowsReplica(ctx context.Context, master, replica string) (bool, string) {
	for _, a := range s.Addrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: a, MaxRetries: -1, PoolSize: 1, ReadTimeout: time.Second})
		addr, err := sc.GetMasterAddrByName(ctx, s.MasterName).Result()
		if err != nil || len(addr) != 2 || addr[0]+":"+addr[1] != master {
			sc.Close()
			return false, fmt.Sprintf("sentinel %s: master %v, %v; want %s", a, addr, err, master)
		}
		reps, err := sc.Replicas(ctx, s.MasterName).Result()
		sc.Close()
		if err != nil {
			return false, fmt.Sprintf("SENTINEL REPLICAS on %s: %v", a, err)
		}
		ok := false
		for _, r := range reps {
			if r["ip"]+":"+r["port"] == replica && r["flags"] == "slave" && r["master-link-status"] == "ok" {
				ok = true
			}
		}
		if !ok {
			return false, fmt.Sprintf("sentinel %s lists replicas %v; want %s healthy", a, reps, replica)
		}
	}
	return true, ""
}

// Client returns a go-redis failover client of the Sentinel's primary
// (it asks the Sentinels where the primary is and follows +switch-master),
// closed by tb.Cleanup.
func (s *Sentinel) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: s.Addrs})
	tb.Cleanup(func() { rdb.Close() })
	return rdb
}

// Prefix returns a key prefix unique within the test process, as
// [Server.Prefix] does.
func (s *Sentinel) Prefix(tb testing.TB) string { return s.nodes[0].Prefix(tb) }

// Master returns the address of the primary the Sentinel names now.
func (s *Sentinel) Master(tb testing.TB) string {
	tb.Helper()
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addrs[0], MaxRetries: -1, PoolSize: 1})
	defer sc.Close()
	addr, err := sc.GetMasterAddrByName(context.Background(), s.MasterName).Result()
	if err != nil || len(addr) != 2 {
		tb.Fatalf("redistest: SENTINEL GET-MASTER-ADDR-BY-NAME %s: %v, %v", s.MasterName, addr, err)
	}
	return addr[0] + ":" + addr[1]
}

// Replica returns the address of the data node that is not the primary.
func (s *Sentinel) Replica(tb testing.TB) string {
	tb.Helper()
	m := s.Master(tb)
	for _, n := range s.nodes {
		if n.Addr != m {
			return n.Addr
		}
	}
	tb.Fatalf("redistest: no data node but the primary %s", m)
	return ""
}

// NodeClient returns a client of the data node at addr, closed by
// tb.Cleanup (a replica answers reads: replica-read-only is the default).
func (s *Sentinel) NodeClient(tb testing.TB, addr string) *redis.Client {
	tb.Helper()
	s.node(tb, addr)
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	tb.Cleanup(func() { rdb.Close() })
	return rdb
}

func (s *Sentinel) node(tb testing.TB, addr string) *Server {
	tb.Helper()
	for _, n := range s.nodes {
		if n.Addr == addr {
			return n
		}
	}
	tb.Fatalf("redistest: no data node at %s", addr)
	return nil
}

// KillMaster ends the primary with SIGKILL and waits until the Sentinel has
// promoted the replica and the replica acts as master. It returns the new
// primary's address. The old one stays down.
func (s *Sentinel) KillMaster(tb testing.TB) string {
	tb.Helper()
	old, replica := s.Master(tb), s.Replica(tb)
	s.node(tb, old).current().kill()
	s.waitPromoted(tb, replica)
	return replica
}

// Failover has the Sentinel fail the primary over (SENTINEL FAILOVER, the
// graceful case: no agreement needed, the old primary is reconfigured as a
// replica of the new one), and waits until the new primary acts as master
// and the old one replicates from it. It returns the new primary.
func (s *Sentinel) Failover(tb testing.TB) string {
	tb.Helper()
	old, replica := s.Master(tb), s.Replica(tb)
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addrs[0], MaxRetries: -1, PoolSize: 1})
	defer sc.Close()
	if err := sc.Failover(context.Background(), s.MasterName).Err(); err != nil {
		tb.Fatalf("redistest: SENTINEL FAILOVER %s: %v", s.MasterName, err)
	}
	s.waitPromoted(tb, replica)
	ctx, cancel := context.WithTimeout(context.Background(), failoverTimeout)
	defer cancel()
	if err := poll(ctx, func() (bool, string) { return replicaUp(ctx, old, replica) }); err != nil {
		tb.Fatalf("redistest: the old primary %s does not replicate from %s: %v", old, replica, err)
	}
	return replica
}

// waitPromoted waits until every Sentinel names replica as the primary and
// replica reports role:master.
func (s *Sentinel) waitPromoted(tb testing.TB, replica string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failoverTimeout)
	defer cancel()
	err := poll(ctx, func() (bool, string) {
		for _, a := range s.Addrs {
			sc := redis.NewSentinelClient(&redis.Options{Addr: a, MaxRetries: -1, PoolSize: 1, ReadTimeout: time.Second})
			addr, err := sc.GetMasterAddrByName(ctx, s.MasterName).Result()
			sc.Close()
			if err != nil || len(addr) != 2 || addr[0]+":"+addr[1] != replica {
				return false, fmt.Sprintf("sentinel %s names %v (%v), want %s", a, addr, err, replica)
			}
		}
		rdb := redis.NewClient(&redis.Options{Addr: replica, MaxRetries: -1, PoolSize: 1, ReadTimeout: time.Second})
		defer rdb.Close()
		info, err := rdb.Info(ctx, "replication").Result()
		if err != nil {
			return false, err.Error()
		}
		if role := ParseInfo(info)["role"]; role != "master" {
			return false, replica + " has role " + role
		}
		return true, ""
	})
	if err != nil {
		tb.Fatalf("redistest: sentinel failover to %s: %v", replica, err)
	}
}

// stop stops the Sentinels first (so that they do not fail over what is
// being stopped), then the data nodes.
func (s *Sentinel) stop() {
	for _, n := range s.sentinels {
		n.stop()
	}
	for _, n := range s.nodes {
		n.stop()
	}
}

// Node returns the server of the replicated cluster at addr, to suspend,
// resume or kill one node (a replica, say) of the test's own.
func (c *Cluster) Node(tb testing.TB, addr string) *Server {
	tb.Helper()
	c.mustReplicated(tb, "Node")
	return c.node(tb, addr)
}

// Node returns the data node at addr (the primary or the replica), to
// suspend, resume or kill it.
func (s *Sentinel) Node(tb testing.TB, addr string) *Server {
	tb.Helper()
	return s.node(tb, addr)
}
