package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// CLI is the executable that creates a cluster (redis-cli --cluster create).
const CLI = "redis-cli"

const (
	// ClusterMasters is how many masters StartCluster starts: three is the
	// smallest cluster redis-cli creates, and enough to spread scopes over
	// nodes that do not share keys.
	ClusterMasters = 3
	// clusterReadyTimeout bounds the creation of a cluster and the wait
	// until every node reports cluster_state:ok.
	clusterReadyTimeout = 30 * time.Second
)

// Cluster is a Redis Cluster of ClusterMasters masters and no replicas,
// each a cluster-enabled redis-server this process started on a free
// loopback port, and joined with redis-cli --cluster create.
type Cluster struct {
	Addrs []string // the masters' host:port (at the start, for a replicated cluster)

	nodes  []*Server
	tmpDir string // removed on stop if non-empty (created by us)

	// A replicated cluster (StartReplicatedCluster, failover.go): one
	// replica per master, fast failure detection, private to its test.
	replicated bool
	Replicas   []string // the replicas' host:port at the start; empty without replicas
}

// StartCluster returns a running cluster for the test. Under [Main] all
// tests of the binary share one cluster (isolate data with [Cluster.Prefix]);
// otherwise the cluster is private to the test and stopped by tb.Cleanup.
// It skips or fails like [Start] when redis-server or redis-cli is missing.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	server, cli := lookPath(tb, Binary), lookPath(tb, CLI)

	mu.Lock()
	if mainActive {
		defer mu.Unlock()
		if cluster == nil && clusterErr == nil {
			dir, err := os.MkdirTemp("", "redistest-cluster-")
			if err != nil {
				clusterErr = err
			} else if cluster, clusterErr = startCluster(server, cli, dir); clusterErr != nil {
				os.RemoveAll(dir)
			} else {
				cluster.tmpDir = dir
			}
		}
		if clusterErr != nil {
			tb.Fatalf("redistest: starting the shared cluster: %v", clusterErr)
		}
		for _, n := range cluster.nodes {
			if n.exited() {
				tb.Fatalf("redistest: cluster node %s has exited; its output:\n%s", n.Addr, n.output())
			}
		}
		return cluster
	}
	mu.Unlock()

	c, err := startCluster(server, cli, tb.TempDir())
	if err != nil {
		tb.Fatalf("redistest: starting a cluster: %v", err)
	}
	tb.Cleanup(c.stop)
	return c
}

// startCluster starts the nodes, each in its own directory under dir (a
// node writes its nodes.conf there), creates the cluster and waits until
// every node reports it ok.
func startCluster(server, cli, dir string) (*Cluster, error) {
	c := new(Cluster)
	for i := range ClusterMasters {
		nodeDir := filepath.Join(dir, "node"+strconv.Itoa(i))
		if err := os.Mkdir(nodeDir, 0o700); err != nil {
			c.stop()
			return nil, err
		}
		n, err := startServer(server, nodeDir, true)
		if err != nil {
			c.stop()
			return nil, fmt.Errorf("node %d: %w", i, err)
		}
		c.nodes = append(c.nodes, n)
		c.Addrs = append(c.Addrs, n.Addr)
	}
	if err := c.create(cli); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// create assigns the slots to the nodes (redis-cli --cluster create) and
// waits until every node sees the whole cluster and reports it ok.
func (c *Cluster) create(cli string) error {
	ctx, cancel := context.WithTimeout(context.Background(), clusterReadyTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v; output:\n%s", CLI, strings.Join(args, " "), err, out)
	}
	for _, n := range c.nodes {
		if err := waitClusterOK(ctx, n.Addr); err != nil {
			return err
		}
	}
	return nil
}

// waitClusterOK polls CLUSTER INFO on addr until the node reports the
// cluster ok, with every slot assigned and every master known.
func waitClusterOK(ctx context.Context, addr string) error {
	return waitClusterNodesOK(ctx, addr, ClusterMasters)
}

// waitClusterNodesOK is waitClusterOK for a cluster of nodes nodes.
func waitClusterNodesOK(ctx context.Context, addr string, nodes int) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 1})
	defer rdb.Close()
	var last string
	for {
		info, err := rdb.ClusterInfo(ctx).Result()
		if err == nil {
			f := ParseInfo(info)
			last = fmt.Sprintf("cluster_state:%s cluster_slots_ok:%s cluster_known_nodes:%s",
				f["cluster_state"], f["cluster_slots_ok"], f["cluster_known_nodes"])
			if f["cluster_state"] == "ok" && f["cluster_slots_ok"] == "16384" &&
				f["cluster_known_nodes"] == strconv.Itoa(nodes) {
				return nil
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster node %s not ok after %v: %s", addr, clusterReadyTimeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Client returns a new go-redis cluster client of c, closed by tb.Cleanup.
// For a replicated cluster its seeds are every node, and it reloads the
// cluster's layout every ReplicatedReload (go-redis's default is a minute,
// and until it reloads a ClusterClient sends a dead master's slots to the
// dead master: a failover would go unnoticed that long).
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	o := &redis.ClusterOptions{Addrs: c.Addrs}
	if c.replicated {
		o.Addrs = append(slices.Clone(c.Addrs), c.Replicas...)
		o.ClusterStateReloadInterval = ReplicatedReload
	}
	rdb := redis.NewClusterClient(o)
	tb.Cleanup(func() { rdb.Close() })
	return rdb
}

// Prefix returns a key prefix unique within the test process, as
// [Server.Prefix] does.
func (c *Cluster) Prefix(tb testing.TB) string { return c.nodes[0].Prefix(tb) }

// stop stops every node and removes a temporary directory c owns.
func (c *Cluster) stop() {
	for _, n := range c.nodes {
		n.stop()
	}
	if c.tmpDir != "" {
		os.RemoveAll(c.tmpDir)
	}
}
