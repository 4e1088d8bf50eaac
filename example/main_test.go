package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/sim"
)

// TestModesEndToEnd runs a small workload through the three modes on
// miniredis, real asynq servers and the fake carriers. It asserts counts
// only: this machine's timing is nobody's business.
func TestModesEndToEnd(t *testing.T) {
	e := miniEnv(t, "test")
	s := settings{
		quota:        sim.Quota{Shape: sim.FixedClock, Rate: 10, Window: time.Second},
		dialect:      mustDialect("prose"),
		polls:        40,
		free:         demoFree,
		workers:      8,
		seed:         1,
		latency:      25 * time.Millisecond,
		timeout:      2 * time.Minute,
		delayedCheck: demoDelayedCheck,
	}
	polls := workload(s.polls, s.free, s.seed)

	got := map[string]figures{}
	for _, md := range modes {
		f, err := runMode(context.Background(), e, md.Name, md, s, polls, nil)
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
		{"-model", "leaky"}, {"-rate", "0"}, {"-polls", "0"}, {"-modes", "local,fast"},
		{"-free", "101"}, {"-delayed-check", "-1s"}, {"-runs", "0"}, {"extra"},
		{"-bench", "-model", "bucket"}, {"-bench", "-headers"}, {"-bench", "-scenarios", "fixed,leaky"},
		{"-bench", "-scenarios", ","}, {"-bench", "-serve-carrier", "127.0.0.1:0"},
		{"-dialect", "klingon"}, {"-bench", "-dialect", "github"}, {"-matrix", "-cells", "fixed/klingon"}, {"-model", "gcra", "-burst", "-1"},
		{"-timeline", "t.svg", "-runs", "2"}, {"-timeline", "t.svg", "-modes", "gate"}, {"-timeline", "t.svg", "-matrix"},
		{"-timeline", "t.svg", "-cells", "fixed/prose,bucket/prose"}, {"-timeline", "t.svg", "-cells", "all"},
		{"-timeline", "t.svg", "-cells", "fixed/klingon"}, {"-timeline", "t.svg", "-model", "bucket"},
		{"-out", "m.md"}, {"-priority", "-out", "m.md"},
	} {
		if err := realMain(args, io.Discard, io.Discard); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}

// TestFlagDefaults: the demo and -bench differ in their defaults only
// where the issues' measurement says so; an explicit value wins.
func TestFlagDefaults(t *testing.T) {
	for _, c := range []struct {
		args  []string
		free  int
		check time.Duration
	}{
		{nil, demoFree, demoDelayedCheck},
		{[]string{"-bench"}, benchFree, benchDelayedCheck},
		{[]string{"-bench", "-free", "15", "-delayed-check", "100ms"}, 15, 100 * time.Millisecond},
		{[]string{"-free", "0", "-delayed-check", "1s"}, 0, time.Second},
	} {
		o, err := parseFlags(c.args, io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if o.free != c.free || o.delayedCheck != c.check {
			t.Errorf("%v: -free %d, -delayed-check %v; want %d, %v", c.args, o.free, o.delayedCheck, c.free, c.check)
		}
	}
}

// TestTimelineFlags: -timeline is -bench on one cell of the matrix, once,
// in the modes local and gate.
func TestTimelineFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		cell string
	}{
		{[]string{"-timeline", "t.svg"}, timelineCell},
		{[]string{"-bench", "-timeline", "t.svg", "-cells", "bucket/discord"}, "bucket/discord"},
	} {
		o, err := parseFlags(c.args, io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		list, err := benchList(o)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if !o.bench || o.modes != "local,gate" || o.runs != 1 || len(list) != 1 || list[0].Name != c.cell {
			t.Errorf("%v: bench %v, modes %q, runs %d, cells %v; want -bench, local,gate, 1 run, %s", c.args, o.bench, o.modes, o.runs, namesOf(list), c.cell)
		}
	}
}

// TestBench runs -bench's loop on a tiny scenario, twice in two modes,
// and reads its table: counts only. Every run of every mode starts on
// names of its own, under which Redis holds nothing yet, and the second
// run turns the modes' order.
func TestBench(t *testing.T) {
	e := miniEnv(t, "bench")
	var labels []string
	names := e.names
	e.names = func(label string) (string, string) {
		queue, prefix := names(label)
		for _, p := range []string{"asynq:{" + queue + "}:", prefix + ":"} {
			if keys, err := e.rdb.Keys(context.Background(), p+"*").Result(); err != nil || len(keys) > 0 {
				t.Errorf("%s: keys %v before the run (%v)", label, keys, err)
			}
		}
		labels = append(labels, label)
		return queue, prefix
	}
	o, err := parseFlags([]string{"-bench", "-polls", "24", "-workers", "8", "-runs", "2", "-delayed-check", "100ms"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	sc := scenario{Name: "tiny", Quota: sim.Quota{Shape: sim.SlidingLog, Rate: 10, Window: time.Second}, Dialect: "httprate"}
	run := []mode{modeNamed(t, "gate"), modeNamed(t, "gate+limit")} // the quickest to finish
	var out bytes.Buffer
	results, err := runBench(context.Background(), e, o, []scenario{sc}, run, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	if want := []string{"tiny.1.gate", "tiny.1.gate+limit", "tiny.2.gate+limit", "tiny.2.gate"}; !slices.Equal(labels, want) {
		t.Errorf("labels %q, want %q", labels, want)
	}
	if len(results) != 1 || results[0].ideal != 2*time.Second {
		t.Fatalf("results %+v: want one scenario of ideal 2s (24 polls, 10 per second)", results)
	}
	for _, md := range run {
		runs := results[0].byMode[md.Name]
		if len(runs) != 2 {
			t.Fatalf("%s: %d runs, want 2", md.Name, len(runs))
		}
		for _, f := range runs {
			if f.Completed != 24 || f.Accepted != 24 || f.Scenario != "tiny" || f.Run < 1 {
				t.Errorf("%s run %d: %+v", md.Name, f.Run, f)
			}
			if f.Waste < 1 {
				t.Errorf("%s run %d: %v requests per accepted", md.Name, f.Run, f.Waste)
			}
		}
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "| tiny | sliding log, 10 per 1s; go-chi/httprate") || strings.Count(last, "×,") != 2 || !strings.HasSuffix(last, "| 2 s |") {
		t.Fatalf("table row %q", last)
	}
}

func TestBenchCell(t *testing.T) {
	f := func(waste float64, wall time.Duration, done int) figures {
		return figures{Polls: 200, Completed: done, Waste: waste, Wall: wall}
	}
	for _, c := range []struct {
		runs []figures
		want string
	}{
		{nil, "–"},
		{[]figures{f(1.04, 21100*time.Millisecond, 200)}, "1.04×, 21.1 s"},
		{[]figures{f(1.06, 22*time.Second, 200), f(1.04, 21100*time.Millisecond, 200)}, "1.04–1.06×, 21.1–22.0 s"},
		{[]figures{f(1, 20*time.Second, 200), f(1.001, 20010*time.Millisecond, 199)}, "1.00×, 20.0 s (1 run(s) incomplete)"},
	} {
		if got := benchCell(c.runs); got != c.want {
			t.Errorf("benchCell = %q, want %q", got, c.want)
		}
	}
}

// miniEnv is an env on a fresh miniredis, with queues named "<name>:label"
// and gate prefixes "qg<name>:label".
func miniEnv(t *testing.T, name string) env {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	return env{
		opt:   asynq.RedisClientOpt{Addr: m.Addr()},
		rdb:   rdb,
		names: func(label string) (string, string) { return name + ":" + label, "qg" + name + ":" + label },
	}
}

// modeNamed is the mode of that name.
func modeNamed(t *testing.T, name string) mode {
	t.Helper()
	for _, m := range modes {
		if m.Name == name {
			return m
		}
	}
	t.Fatalf("no mode %q", name)
	return mode{}
}
