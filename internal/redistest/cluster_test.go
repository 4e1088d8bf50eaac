package redistest

import (
	"context"
	"fmt"
	"testing"
)

// TestCluster: the cluster answers on every master, keys spread over all of
// them, and under Main it is shared.
func TestCluster(t *testing.T) {
	c := StartCluster(t)
	if len(c.Addrs) != ClusterMasters {
		t.Fatalf("Addrs = %v, want %d masters", c.Addrs, ClusterMasters)
	}
	if again := StartCluster(t); again != c {
		t.Error("under Main, StartCluster returned two clusters")
	}
	rdb := c.Client(t)
	ctx := context.Background()
	prefix := c.Prefix(t)
	masters := map[string]bool{}
	for i := 0; len(masters) < ClusterMasters; i++ {
		if i == 1000 {
			t.Fatalf("1000 keys landed on only %d masters", len(masters))
		}
		key := fmt.Sprintf("%s:k%d", prefix, i)
		if err := rdb.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		m, err := rdb.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := m.Get(ctx, key).Int(); err != nil || got != i {
			t.Fatalf("GET %s on its master %s = %v, %v; want %d", key, m.Options().Addr, got, err, i)
		}
		masters[m.Options().Addr] = true
	}
	for _, a := range c.Addrs {
		if !masters[a] {
			t.Errorf("no key on master %s (keys landed on %v)", a, masters)
		}
	}
	if err := rdb.Del(ctx, prefix+":k0").Err(); err != nil {
		t.Error(err)
	}
}
