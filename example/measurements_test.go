package main

import (
	"bytes"
	"io"
	"testing"
	"time"
)

// TestWriteMeasurements writes a small fixed report and reads it whole.
func TestWriteMeasurements(t *testing.T) {
	args := []string{"-bench", "-matrix", "-cells", "fixed/retry-after", "-runs", "2", "-polls", "24", "-out", "m.md"}
	o, err := parseFlags(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	list, err := benchList(o)
	if err != nil {
		t.Fatal(err)
	}
	run := []mode{modeNamed(t, "local"), modeNamed(t, "gate")}
	f := func(mode string, n int, waste float64, wall time.Duration) figures {
		return figures{Mode: mode, Run: n, Polls: 24, Completed: 24, Waste: waste, Wall: wall}
	}
	results := []benchResult{{sc: list[0], ideal: 0, byMode: map[string][]figures{
		"local": {f("local", 1, 3, 20200*time.Millisecond), f("local", 2, 2.96, 20100*time.Millisecond)},
		"gate":  {f("gate", 1, 1.07, 21300*time.Millisecond), f("gate", 2, 1.13, 21300*time.Millisecond)},
	}}}
	var b bytes.Buffer
	if err := writeMeasurements(&b, o.args, time.Date(2026, 3, 4, 23, 30, 0, 0, time.FixedZone("X", -2*3600)), o, run, results); err != nil {
		t.Fatal(err)
	}
	want := "# Measurements\n" +
		"\n" +
		"- command: `go run ./example -bench -matrix -cells fixed/retry-after -runs 2 -polls 24 -out m.md`\n" +
		"- date: 2026-03-05 (UTC)\n" +
		"- runs: 2 of each cell and mode\n" +
		"\n" +
		"24 polls (24 acme, 0 swift without quota), 20 workers, carrier latency 25ms, asynq DelayedTaskCheckInterval 1s, seed 1, 2 run(s) each\n" +
		"\n" +
		"cells: requests per accepted poll, wall time (min–max over runs); wall time runs from the start of the quota's first window, on a whole second, to the last poll done\n" +
		"\n" +
		"ideal: when the quota answers the last of its 24 polls if every request is sent at the earliest instant it accepts one (sim.Quota.IdealLatency)\n" +
		"\n" +
		"| cell | provider | local (asynq wiki pattern: each task waits its own hint) | gate, nothing configured | the quota's ideal |\n" +
		"|---|---|---|---|---|\n" +
		"| fixed/retry-after | fixed window, 40 per 5s; Retry-After in delta seconds, rounded up | 2.96–3.00×, 20.1–20.2 s | 1.07–1.13×, 21.3 s | 0 s |\n" +
		"\n" +
		"goals, each judged on the worst of 2 run(s) per cell (gate against local and pause, and concurrency against gate+limit, within one run):\n" +
		"\n" +
		"- gate, nothing configured: no slower than the faster of local and pause by more than 5% + 0.5 s: not measured (-modes without pause)\n" +
		"- gate, nothing configured: at most 1.10 requests per accepted poll, 1.02 where the provider advertises its budget: 1 of 1 cells miss it: fixed/retry-after (run 2: gate 1.13×, allowed 1.10×)\n" +
		"- concurrency, nothing configured: within 2× of gate+limit's time and no slower than 3 s: not measured (-modes without gate+limit)\n" +
		"- gate+limit: 1.00 requests per accepted poll: not measured (-modes without gate+limit)\n" +
		"- gate+limit: within 5% + 0.5 s of the quota's ideal: not measured (-modes without gate+limit)\n"
	if got := b.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestCommandLine(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "go run ./example"},
		{[]string{"-bench", "-modes", "local,gate+limit", "-redis", "redis://127.0.0.1:6390/0"}, "go run ./example -bench -modes local,gate+limit -redis redis://127.0.0.1:6390/0"},
		{[]string{"-out", "my measurements.md", "-cells", ""}, "go run ./example -out 'my measurements.md' -cells ''"},
		{[]string{"-out", "it's.md"}, `go run ./example -out 'it'\''s.md'`},
		// A password never reaches the file.
		{[]string{"-redis", "redis://:s3cret@db:6379/0"}, "go run ./example -redis redis://:xxxxx@db:6379/0"},
		{[]string{"-redis=redis://u:s3cret@db/1"}, "go run ./example -redis=redis://u:xxxxx@db/1"},
	} {
		if got := commandLine(c.args); got != c.want {
			t.Errorf("commandLine(%q) = %s, want %s", c.args, got, c.want)
		}
	}
	if got := inlineCode("a `b` c"); got != "`` a `b` c ``" {
		t.Errorf("inlineCode = %s", got)
	}
}
