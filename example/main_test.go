package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// TestModesEndToEnd runs a small workload through the three modes on
// miniredis, real asynq servers and the fake carriers. It asserts counts
// only: this machine's timing is nobody's business.
func TestModesEndToEnd(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	e := env{
		opt:   asynq.RedisClientOpt{Addr: m.Addr()},
		rdb:   rdb,
		names: func(md mode) (string, string) { return "test:" + md.Name, "qgtest:" + md.Name },
	}
	s := settings{
		quota:   quotaSpec{Model: "fixed", Rate: 10, Window: time.Second},
		polls:   40,
		workers: 8,
		seed:    1,
		latency: 25 * time.Millisecond,
		timeout: 2 * time.Minute,
	}
	polls := workload(s.polls, s.seed)

	got := map[string]figures{}
	for _, md := range modes {
		f, err := runMode(context.Background(), e, md, s, polls, nil)
		if err != nil {
			t.Fatalf("%s: %v", md.Name, err)
		}
		t.Logf("%s: %+v", md.Name, f)
		got[md.Name] = f

		if f.Completed != s.polls || f.Archived != 0 {
			t.Errorf("%s: %d of %d polls completed, %d archived", md.Name, f.Completed, s.polls, f.Archived)
		}
		if f.Accepted != s.polls {
			t.Errorf("%s: %d requests accepted, want one per poll (%d)", md.Name, f.Accepted, s.polls)
		}
		if f.Resolutions != f.Requests {
			t.Errorf("%s: %d client resolutions for %d requests, want one each", md.Name, f.Resolutions, f.Requests)
		}
		if f.FreeDefer != 0 {
			t.Errorf("%s: %d deferrals at the carrier without quota, want 0", md.Name, f.FreeDefer)
		}
		if f.Leaks != 0 {
			t.Errorf("%s: %d requests sent during a pause the gate knew when their task entered", md.Name, f.Leaks)
		}
	}

	local, gate, limit := got["local"], got["gate"], got["gate+limit"]
	if local.Refused == 0 {
		t.Errorf("local: no refusal at all: the workload does not exceed the quota")
	}
	if gate.Requests >= local.Requests {
		t.Errorf("gate sent %d requests, local %d: want fewer with the gate", gate.Requests, local.Requests)
	}
	// Into an already-closed window, the gate only lets through what was in
	// flight when a closure began: at most the other workers' requests.
	if bound := (s.workers - 1) * gate.Closures; gate.IntoClosed > bound {
		t.Errorf("gate: %d refusals into closed windows, more than (workers-1)×closures = %d", gate.IntoClosed, bound)
	}
	if gate.Pauses == 0 {
		t.Errorf("gate: no pause recorded")
	}
	// At the carrier's own quota, the limit leaves little to refuse: at most
	// a request that arrived late into the next window, now and then.
	if limit.Refused > 3 {
		t.Errorf("gate+limit: %d refusals, want at most 3", limit.Refused)
	}
	if limit.Requests > gate.Requests {
		t.Errorf("gate+limit sent %d requests, gate %d", limit.Requests, gate.Requests)
	}
}

// TestJSON runs the command itself on a tiny workload and reads its JSON.
func TestJSON(t *testing.T) {
	var out, errOut bytes.Buffer
	err := realMain([]string{"-polls", "30", "-workers", "8", "-modes", "gate,local", "-json"}, &out, &errOut)
	if err != nil {
		t.Fatalf("realMain: %v\n%s", err, errOut.String())
	}
	var names []string
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var f figures
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if f.Completed != 30 {
			t.Errorf("%s: %d of 30 polls completed", f.Mode, f.Completed)
		}
		if f.Leaks != 0 {
			t.Errorf("%s: %d requests sent into a pause the gate knew", f.Mode, f.Leaks)
		}
		names = append(names, f.Mode)
	}
	if len(names) != 2 || names[0] != "local" || names[1] != "gate" {
		t.Fatalf("modes in the output: %v, want [local gate]", names)
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-model", "sliding"}, {"-rate", "0"}, {"-polls", "0"}, {"-modes", "local,fast"},
	} {
		if err := realMain(args, io.Discard, io.Discard); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}
