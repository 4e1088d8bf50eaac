package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// MigrateSlot moves slot from the master that serves it to another master
// of the cluster, as redis-cli --cluster reshard does: the slot marked
// importing on the target and migrating on the source, its keys moved one
// MIGRATE at a time with every pause between two (so that clients meet
// the slot half moved: ASK redirections, TRYAGAIN for a command whose
// keys are split), then given to the target on every master. It returns
// the source's and the target's addresses. A private cluster only
// (StartReplicatedCluster): the shared one's other tests would meet the
// move.
func (c *Cluster) MigrateSlot(tb testing.TB, slot int, pause time.Duration) (from, to string) {
	tb.Helper()
	if !c.replicated {
		tb.Fatal("redistest: MigrateSlot moves a slot of a private cluster only (StartReplicatedCluster)")
	}
	ctx := context.Background()
	topo, _, err := c.liveView(ctx)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	src, dst, err := slotMove(ctx, c.NodeClient(tb, c.Masters(tb)[0], false), topo, slot)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	s, d := c.NodeClient(tb, src.addr, false), c.NodeClient(tb, dst.addr, false)
	host, port, _ := strings.Cut(dst.addr, ":")
	must := func(what string, err error) {
		if err != nil {
			tb.Fatalf("redistest: migrate slot %d from %s to %s: %s: %v", slot, src.addr, dst.addr, what, err)
		}
	}
	must("importing", d.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", src.id).Err())
	must("migrating", s.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst.id).Err())
	for {
		keys, err := s.ClusterGetKeysInSlot(ctx, slot, 1).Result()
		must("keys", err)
		if len(keys) == 0 {
			break
		}
		must("migrate "+keys[0], s.Do(ctx, "MIGRATE", host, port, "", 0, 5000, "KEYS", keys[0]).Err())
		time.Sleep(pause)
	}
	for _, n := range topo {
		if n.master && !n.failed {
			must("node "+n.addr, c.NodeClient(tb, n.addr, false).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dst.id).Err())
		}
	}
	return src.addr, dst.addr
}

// slotMove finds the master that serves slot (asked of rdb) and a master
// of topo to move it to.
func slotMove(ctx context.Context, rdb *redis.Client, topo []clusterNode, slot int) (src, dst clusterNode, err error) {
	ranges, err := rdb.ClusterSlots(ctx).Result()
	if err != nil {
		return src, dst, err
	}
	owner := ""
	for _, r := range ranges {
		if int(r.Start) <= slot && slot <= int(r.End) && len(r.Nodes) > 0 {
			owner = r.Nodes[0].ID
		}
	}
	for _, n := range topo {
		switch {
		case !n.master || n.failed:
		case n.id == owner:
			src = n
		case dst.id == "":
			dst = n
		}
	}
	if src.id == "" || dst.id == "" {
		return src, dst, fmt.Errorf("no master serves slot %s, or none to move it to", strconv.Itoa(slot))
	}
	return src, dst, nil
}
