package store

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
)

// TestIdentityText: the identity of a master is its run_id and its
// replication ID; a replica, or an answer without them, has none.
func TestIdentityText(t *testing.T) {
	const (
		server = "# Server\r\nredis_version:7.0.15\r\nrun_id:r1\r\ntcp_port:6379\r\n"
		master = "# Replication\r\nrole:master\r\nconnected_slaves:0\r\nmaster_replid:p1\r\nmaster_replid2:0000\r\n"
	)
	for _, c := range []struct {
		name, server, replication, want string
	}{
		{"master", server, master, "r1/p1"},
		{"replica", server, strings.Replace(master, "role:master", "role:slave", 1), ""},
		{"no run_id", "# Server\r\nredis_version:7.0.15\r\n", master, ""},
		{"no replication ID", server, "# Replication\r\nrole:master\r\n", ""},
		{"nothing", "", "", ""},
	} {
		if got := identity(c.server, c.replication); got != c.want {
			t.Errorf("%s: identity = %q, want %q", c.name, got, c.want)
		}
	}
}

// TestIdentity: a real Redis tells its identity, the same until it
// restarts; miniredis tells none, and that is an answer, not a failure
// (the store does not recover from it).
func TestIdentity(t *testing.T) {
	ctx := context.Background()
	t.Run("real", func(t *testing.T) {
		srv := redistest.StartPrivate(t)
		st := testStore(srv.Client(t), srv.Prefix(t))
		read := func() string {
			t.Helper()
			ms, err := st.Masters(ctx, []string{"a", "b"})
			if err != nil || len(ms) != 1 || ms[0].Addr != "" || len(ms[0].Keys) != 2 {
				t.Fatalf("Masters = %+v, %v; want one of both keys", ms, err)
			}
			id, err := st.Identity(ctx, ms[0])
			if err != nil {
				t.Fatal(err)
			}
			return id
		}
		first := read()
		if first == "" || read() != first {
			t.Fatalf("identity %q, then %q: want one, the same", first, read())
		}
		srv.Restart(t)
		if again := read(); again == "" || again == first {
			t.Errorf("after a restart the identity is %q, want another than %q", again, first)
		}
	})
	t.Run("mini", func(t *testing.T) {
		_, rdb := newMini(t)
		recovered := 0
		st := New(Config{Client: rdb, Prefix: "qg", Timeout: 30 * time.Second, MaxPause: 12 * time.Hour,
			Hooks: Hooks{Recovered: func() { recovered++ }}})
		ms, _ := st.Masters(ctx, []string{"a"})
		if id, err := st.Identity(ctx, ms[0]); id != "" || err != nil {
			t.Errorf("miniredis: Identity = %q, %v; want none, no error", id, err)
		}
		if err := st.Ping(ctx, ms[0]); err != nil || recovered != 0 {
			t.Errorf("a PING after it: %v, the store recovered %d times; want nil, 0", err, recovered)
		}
	})
}

// TestMastersCluster: a cluster's keys are grouped by the master of their
// slot, every master named once, in the order of their addresses.
func TestMastersCluster(t *testing.T) {
	ctx := context.Background()
	c := redistest.StartCluster(t)
	rdb := c.Client(t)
	st := testStore(rdb, c.Prefix(t))
	var keys []string
	for i := range 300 {
		keys = append(keys, scopeKeys("qg", "ups", strconv.Itoa(i)).Pause)
	}
	ms, err := st.Masters(ctx, keys)
	if err != nil || len(ms) != 3 {
		t.Fatalf("Masters = %d masters, %v; want 3", len(ms), err)
	}
	n := 0
	for i, m := range ms {
		if i > 0 && ms[i-1].Addr >= m.Addr {
			t.Errorf("masters out of order: %s before %s", ms[i-1].Addr, m.Addr)
		}
		for _, k := range m.Keys {
			if addr, ok := st.MasterOf(k); !ok || addr != m.Addr {
				t.Errorf("%s grouped under %s, MasterOf says %s, %v", k, m.Addr, addr, ok)
			}
		}
		n += len(m.Keys)
		if id, err := st.Identity(ctx, m); id == "" || err != nil {
			t.Errorf("master %s: Identity = %q, %v; want one", m.Addr, id, err)
		}
	}
	if n != len(keys) {
		t.Errorf("%d keys grouped, want %d", n, len(keys))
	}
}
