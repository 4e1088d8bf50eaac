package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/sim"
)

// m is one mode's made-up figures in one run: wall seconds and requests
// per accepted poll, and 200 polls completed unless done says fewer.
type m struct {
	mode  string
	wall  float64
	waste float64
	done  int
}

// cell is the cell named name of the matrix, of the ideal in seconds, with
// a run per list of figures (run 1 first).
func cell(t *testing.T, name string, ideal float64, runs ...[]m) benchResult {
	t.Helper()
	list, err := selectScenarios(name, matrix)
	if err != nil {
		t.Fatal(err)
	}
	r := benchResult{sc: list[0], ideal: dur(ideal), byMode: map[string][]figures{}}
	for i, run := range runs {
		for _, x := range run {
			done := 200
			if x.done > 0 {
				done = x.done
			}
			f := figures{Scenario: name, Run: i + 1, Mode: x.mode, Polls: 200, Completed: done, Wall: dur(x.wall), Waste: x.waste}
			r.byMode[x.mode] = append(r.byMode[x.mode], f)
		}
	}
	return r
}

func dur(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// good is a run of fixed/prose (ideal 20 s) that meets every goal: gate a
// little slower than the faster reference, gate+limit near the ideal.
func good(gate float64) []m {
	return []m{{"local", 22, 2.5, 0}, {"pause", 21, 1.3, 0}, {"gate", gate, 1.05, 0}, {"gate+limit", 20.6, 1, 0}}
}

// TestGoals judges made-up runs: which cells miss which goal, and in which
// run (cell#run), or what the line says instead.
func TestGoals(t *testing.T) {
	all := modes
	var (
		// Nothing configured, fixed/prose: 1.05 × 21 + 0.5 = 22.55 s allowed.
		metGate    = cell(t, "fixed/prose", 20, good(22.5), good(22.55), good(21))
		slowInRun3 = cell(t, "fixed/prose", 20, good(22), good(22), good(22.6), good(22))
		// Side by side: run 2's references were slow, and gate with them;
		// against run 1's references its 25 s would miss.
		sideBySide = cell(t, "fixed/prose", 20,
			[]m{{"local", 20, 2, 0}, {"pause", 21, 1.2, 0}, {"gate", 21, 1.05, 0}, {"gate+limit", 20.5, 1, 0}},
			[]m{{"local", 30, 2, 0}, {"pause", 24, 1.2, 0}, {"gate", 25, 1.05, 0}, {"gate+limit", 20.5, 1, 0}})
		incompleteGate = cell(t, "fixed/prose", 20, good(21), []m{{"local", 22, 2.5, 0}, {"pause", 21, 1.3, 0}, {"gate", 90, 1.05, 180}, {"gate+limit", 20.6, 1, 0}})
		// A reference that timed out counts at its timeout: 1.05 × 40 +
		// 0.5 = 42.5 s allowed.
		incompleteLocal = cell(t, "fixed/prose", 20, []m{{"local", 40, 2.5, 150}, {"pause", 60, 1.3, 0}, {"gate", 45, 1.05, 0}, {"gate+limit", 20.6, 1, 0}})
	)
	// Waste, nothing configured: 1.10, or 1.02 where the budget is
	// advertised (fixed/github), at two decimals.
	waste := func(name string, w float64) benchResult {
		run := good(21)
		run[2].waste = w
		return cell(t, name, 20, run)
	}
	// Concurrency (ideal 1.5 s): at most 2 × gate+limit and 3 s.
	conc := func(gate, limit float64) benchResult {
		return cell(t, "concurrency/retry-after", 1.5, []m{{"local", 4, 3, 0}, {"pause", 3.5, 2, 0}, {"gate", gate, 1.05, 0}, {"gate+limit", limit, 1, 0}})
	}
	// Configured, bucket/prose (ideal 23.75 s): 1.00 requests per accepted
	// at two decimals, and 1.05 × 23.75 + 0.5 = 25.4375 s.
	limit := func(wall, w float64) []m {
		return []m{{"local", 27, 2, 0}, {"pause", 26, 1.2, 0}, {"gate", 26, 1.01, 0}, {"gate+limit", wall, w, 0}}
	}

	for _, c := range []struct {
		name    string
		ran     []mode
		results []benchResult
		want    [5]string // per goal: the misses as cell#run, space-separated, or "" or what the line says
	}{
		{"all met", all, []benchResult{metGate, conc(1.9, 1)}, [5]string{}},
		{"slow in one run of four", all, []benchResult{slowInRun3}, [5]string{0: "fixed/prose#3", 2: "no cell"}},
		{"ratios within a run", all, []benchResult{sideBySide}, [5]string{2: "no cell"}},
		{"gate incomplete", all, []benchResult{incompleteGate}, [5]string{0: "fixed/prose#2", 1: "fixed/prose#2", 2: "no cell"}},
		{"reference incomplete", all, []benchResult{incompleteLocal}, [5]string{0: "fixed/prose#1", 2: "no cell"}},
		{"waste", all, []benchResult{
			waste("fixed/prose", 1.10), waste("fixed/retry-after", 1.11),
			waste("fixed/github", 1.021), waste("fixed/x", 1.03),
			waste("fixed/github-secondary", 1.08), // advertises no binding budget
		}, [5]string{1: "fixed/retry-after#1 fixed/x#1", 2: "no cell"}},
		{"concurrency", all, []benchResult{conc(2.1, 1), conc(3.2, 1.8), conc(2.9, 1.5)}, [5]string{2: "concurrency/retry-after#1 concurrency/retry-after#1"}},
		{"configured", all, []benchResult{
			cell(t, "bucket/prose", 23.75, limit(25.4, 1.004), limit(25.4, 1.01)),
			cell(t, "bucket/discord", 23.75, limit(25.5, 1), limit(24, 1)),
		}, [5]string{2: "no cell", 3: "bucket/prose#2", 4: "bucket/discord#1"}},
		{"the worst run is reported", all, []benchResult{
			cell(t, "bucket/prose", 23.75, limit(25.5, 1), limit(27, 1), limit(26, 1)),
		}, [5]string{2: "no cell", 4: "bucket/prose#2"}},
		{"modes not run", []mode{modeNamed(t, "local"), modeNamed(t, "gate")}, []benchResult{metGate},
			[5]string{0: "not measured", 2: "not measured", 3: "not measured", 4: "not measured"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for i, r := range evaluateGoals(c.results, c.ran) {
				if got := summarise(r); got != c.want[i] {
					t.Errorf("goal %d (%s): %q, want %q\n%s", i, r.goal.text, got, c.want[i], goalLine(r))
				}
			}
		})
	}
}

// summarise is a goal's result as TestGoals writes it.
func summarise(r goalResult) string {
	switch {
	case len(r.missing) > 0:
		return "not measured"
	case r.applied == 0:
		return "no cell"
	}
	var s []string
	for _, m := range r.misses {
		s = append(s, fmt.Sprintf("%s#%d", m.cell, m.run))
	}
	return strings.Join(s, " ")
}

// TestPrintGoals reads the summary whole.
func TestPrintGoals(t *testing.T) {
	slow := good(21)
	slow[2] = m{"gate", 23, 1.04, 0}
	results := []benchResult{
		cell(t, "fixed/prose", 20, good(21), slow),
		cell(t, "fixed/github", 20, []m{{"local", 22, 2.5, 0}, {"pause", 21, 1.3, 0}, {"gate", 90, 1.01, 190}, {"gate+limit", 20.6, 1, 0}}),
	}
	var b bytes.Buffer
	printGoals(&b, 2, evaluateGoals(results, modes))
	want := "goals, each judged on the worst of 2 run(s) per cell (gate against local and pause, and concurrency against gate+limit, within one run):\n" +
		"\n" +
		"- gate, nothing configured: no slower than the faster of local and pause by more than 5% + 0.5 s: 2 of 2 cells miss it: fixed/prose (run 2: gate 23.0 s, allowed 22.6 s (pause 21.0 s)); fixed/github (run 1: gate incomplete, 190/200 polls)\n" +
		"- gate, nothing configured: at most 1.10 requests per accepted poll, 1.02 where the provider advertises its budget: 1 of 2 cells miss it: fixed/github (run 1: gate incomplete, 190/200 polls)\n" +
		"- concurrency, nothing configured: within 2× of gate+limit's time and no slower than 3 s: no cell of this run\n" +
		"- gate+limit: 1.00 requests per accepted poll: all cells meet it\n" +
		"- gate+limit: within 5% + 0.5 s of the quota's ideal: all cells meet it\n"
	if got := b.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// TestAdvertisesBudget holds the list to internal/sim: a dialect on it
// writes headers on an accepted response (github-secondary does too, but
// of a budget that does not refuse).
func TestAdvertisesBudget(t *testing.T) {
	r := sim.Reply{Now: time.Unix(1e9, 0), Decision: sim.Decision{OK: true}, State: sim.State{Limit: 40, Remaining: 39, Window: 5 * time.Second}}
	for _, d := range sim.Dialects {
		h := make(map[string][]string)
		d.Write(h, r)
		sends := len(h) > 0 && d.Name != "github-secondary"
		if sends != advertisesBudget[d.Name] {
			t.Errorf("dialect %s: headers on an accepted response %v, advertisesBudget %v", d.Name, len(h) > 0, advertisesBudget[d.Name])
		}
	}
	for name := range advertisesBudget {
		if _, ok := sim.DialectNamed(name); !ok {
			t.Errorf("advertisesBudget: no dialect %s", name)
		}
	}
}
