package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quotagate/quotagate/internal/sim"
)

// This file is -bench: the measurement of issues 8 and 9 (the scenarios)
// and of issue 15 (-matrix: every provider shape × dialect), every scenario
// in every mode, printed as the issues' table.

// A scenario is one provider of the benchmark: how it counts (a sim
// quota) and how it speaks (a sim dialect).
type scenario struct {
	Name    string // for -scenarios, -cells and the JSON
	Quota   sim.Quota
	Dialect string // a sim dialect's name
}

// The quotas of the benchmark: a fixed window of 40 per 5 s, a token
// bucket (and a GCRA) of 8/s with burst 10, and 5 requests in flight. With
// 200 polls their ideals are 20 s, 23.75 s (GCRA 23.625 s, delayed
// 24.875 s) and 39 latencies.
var (
	fixed40      = sim.Quota{Shape: sim.FixedClock, Rate: 40, Window: 5 * time.Second}
	bucket8      = sim.Quota{Shape: sim.TokenBucket, Rate: 8, Burst: 10}
	gcra8        = sim.Quota{Shape: sim.GCRA, Rate: 8, Burst: 10}
	concurrency5 = sim.Quota{Shape: sim.Concurrency, Rate: 5}
	// fixed40concurrency5 limits both: 40 per 5 s, and 5 in flight within
	// each window's burst (GitHub's primary and secondary limits).
	fixed40concurrency5 = sim.Quota{Shape: sim.FixedClock, Rate: 40, Window: 5 * time.Second, InFlight: 5}
)

func withShape(q sim.Quota, s sim.Shape) sim.Quota { q.Shape = s; return q }

// scenarios are the providers of issues 8 and 9 (-bench without -matrix):
// the fixed window and the bucket with their hint in prose, a sliding
// window whose refusals always say the whole window while it reports its
// budget (go-chi/httprate), and the first two again with their budget in
// headers.
var scenarios = []scenario{
	{Name: "fixed", Quota: fixed40, Dialect: "prose"},
	{Name: "bucket", Quota: bucket8, Dialect: "prose"},
	{Name: "sliding+headers", Quota: withShape(fixed40, sim.SlidingLog), Dialect: "httprate"},
	{Name: "fixed+headers", Quota: fixed40, Dialect: "delta"},
	{Name: "bucket+headers", Quota: bucket8, Dialect: "delta"},
}

// matrix is -bench -matrix: every shape of internal/sim at least once, each
// with the dialects its kind of limiter typically speaks, and every dialect
// at least once; a cell is named shape/dialect. With 200 polls at 20
// workers:
//
//	fixed (40 per 5 s on the clock)    prose (the article's provider),
//	                                   retry-after, retry-after-date,
//	                                   github (403), github-429,
//	                                   github-secondary (403 + retry-after),
//	                                   x, epoch-floor (the reset rounded
//	                                   down), ietf, reset-ms
//	fixed-first (40 per 5 s from the   retry-after (INCR + EXPIRE),
//	first request)                     epoch-floor (X-RateLimit-* only)
//	bucket (8/s, burst 10)             prose, discord, delta
//	gcra (8/s, burst 10, nodelay)      until-full (throttled), none (nginx)
//	gcra-delay (nginx without nodelay) none
//	sliding-log (40 per 5 s)           window (the whole window as hint)
//	sliding-counter (40 per 5 s)       httprate
//	concurrency (5 in flight)          retry-after
//	fixed+concurrency (40 per 5 s,     retry-after (the window's exact
//	5 in flight)                       wait, or 1 s for the flight)
//
// Every cell runs every mode (-modes): local (asynq's wiki pattern), pause
// (the plain shared pause, pause.go), gate (quotagate as shipped, nothing
// configured), gate+limit (Config.Limits at the quota as documented:
// configuredLimits), beside the quota's ideal. A mode gives up after
// -timeout (90 s by default with -matrix); 22 cells × 4 modes take about
// 30–40 minutes for one run.
var matrix = []scenario{
	{Quota: fixed40, Dialect: "prose"},
	{Quota: fixed40, Dialect: "retry-after"},
	{Quota: fixed40, Dialect: "retry-after-date"},
	{Quota: fixed40, Dialect: "github"},
	{Quota: fixed40, Dialect: "github-429"},
	{Quota: fixed40, Dialect: "github-secondary"},
	{Quota: fixed40, Dialect: "x"},
	{Quota: fixed40, Dialect: "epoch-floor"},
	{Quota: fixed40, Dialect: "ietf"},
	{Quota: fixed40, Dialect: "reset-ms"},
	{Quota: withShape(fixed40, sim.FixedFirst), Dialect: "retry-after"},
	{Quota: withShape(fixed40, sim.FixedFirst), Dialect: "epoch-floor"},
	{Quota: bucket8, Dialect: "prose"},
	{Quota: bucket8, Dialect: "discord"},
	{Quota: bucket8, Dialect: "delta"},
	{Quota: gcra8, Dialect: "until-full"},
	{Quota: gcra8, Dialect: "none"},
	{Quota: withShape(gcra8, sim.GCRADelay), Dialect: "none"},
	{Quota: withShape(fixed40, sim.SlidingLog), Dialect: "window"},
	{Quota: withShape(fixed40, sim.SlidingCounter), Dialect: "httprate"},
	{Quota: concurrency5, Dialect: "retry-after"},
	{Quota: fixed40concurrency5, Dialect: "retry-after"},
}

func init() {
	for i := range matrix {
		matrix[i].Name = matrix[i].Quota.Name() + "/" + matrix[i].Dialect
	}
}

// title describes a scenario in the table.
func (sc scenario) title() string {
	return sc.Quota.String() + "; " + mustDialect(sc.Dialect).Doc
}

func namesOf(list []scenario) string {
	names := make([]string, len(list))
	for i, sc := range list {
		names[i] = sc.Name
	}
	return strings.Join(names, ",")
}

func scenarioNames() string { return namesOf(scenarios) }

// selectScenarios returns the scenarios of all named in list, in their
// usual order; "all" names every one.
func selectScenarios(list string, all []scenario) ([]scenario, error) {
	if list == "all" {
		return all, nil
	}
	return selectNamed(list, all, func(sc scenario) string { return sc.Name }, "scenario", namesOf(all))
}

// benchResult is what the runs of one scenario measured, by mode.
type benchResult struct {
	sc     scenario
	ideal  time.Duration
	byMode map[string][]figures
}

// runBench runs every scenario in every mode, o.runs times, each run of
// each mode on fresh state (its own queue and gate prefix, runLabel: what
// a gate learns outlives its run), and prints the table (or, with -json,
// every run's figures). The runs are interleaved (run 1 of every
// scenario, then run 2, ...) so a slow spell of a shared machine does not
// fall on one scenario only; within a run a scenario runs every mode one
// after another, so the ratios between modes are measured side by side,
// and the order of the modes turns by one each run (modesOfRun), so that
// none always runs first.
func runBench(ctx context.Context, e env, o options, list []scenario, run []mode, stdout io.Writer, prog *progress) ([]benchResult, error) {
	results := make([]benchResult, len(list))
	for i, sc := range list {
		results[i] = benchResult{sc: sc, byMode: map[string][]figures{}}
	}
	for n := 1; n <= o.runs; n++ {
		for i, sc := range list {
			s := o.settings
			s.quota, s.dialect = sc.Quota, mustDialect(sc.Dialect)
			polls := workload(s.polls, s.free, s.seed)
			results[i].ideal = s.quota.IdealLatency(countAt(polls, constrained), s.latency)
			for _, m := range modesOfRun(run, n) {
				prog.setPrefix(fmt.Sprintf("%s #%d ", sc.Name, n))
				f, rec, err := recordMode(ctx, e, runLabel(sc, n, m), m, s, polls, prog)
				switch {
				case errors.Is(err, errTimedOut):
					// Counted as incomplete in the table; the next runs go on.
				case err != nil:
					return nil, fmt.Errorf("scenario %s, run %d: %w", sc.Name, n, err)
				}
				if e.onRecord != nil {
					e.onRecord(sc.Name, n, rec)
				}
				f.Scenario, f.Run = sc.Name, n
				results[i].byMode[m.Name] = append(results[i].byMode[m.Name], f)
				if o.jsonOut {
					if err := printJSON(stdout, []figures{f}); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	if !o.jsonOut {
		printBench(stdout, o, run, results)
	}
	return results, nil
}

// runLabel names run n of mode m on sc: its queue and gate prefix
// (env.names), distinct for every scenario, run and mode.
func runLabel(sc scenario, n int, m mode) string {
	return fmt.Sprintf("%s.%d.%s", sc.Name, n, m.Name)
}

// modesOfRun is the modes of run in the order run n runs them: turned by
// n−1, so run 1 keeps the usual order.
func modesOfRun(run []mode, n int) []mode {
	k := (n - 1) % len(run)
	return append(slices.Clone(run[k:]), run[:k]...)
}

// timelineCell is -timeline's cell unless -cells names another: a fixed
// window on the clock whose refusals say Retry-After in seconds, the
// plainest provider that a shared pause serves.
const timelineCell = "fixed/retry-after"

// runTimeline is -timeline: it runs the cell sc once in each mode of run
// (local and gate), each on fresh state, prints its table as -bench does,
// and draws what the constrained carrier received in each in the SVG file
// o.timeline.
func runTimeline(ctx context.Context, e env, o options, sc scenario, run []mode, stdout, stderr io.Writer, prog *progress) ([]benchResult, error) {
	var recs []recording
	e.onRecord = func(_ string, _ int, rec recording) { recs = append(recs, rec) }
	results, err := runBench(ctx, e, o, []scenario{sc}, run, stdout, prog)
	if err != nil {
		return nil, err
	}
	polls := workload(o.polls, o.free, o.seed)
	tl := timeline{
		Title: sc.Name + ": " + sc.title(),
		Note: fmt.Sprintf("%d polls, %d workers, carrier latency %v, asynq DelayedTaskCheckInterval %v, seed %d; one run per mode, each on a fresh Redis prefix",
			countAt(polls, constrained), o.workers, o.latency, o.delayedCheck, o.seed),
		Quota:   sc.Quota,
		Latency: o.latency,
		Polls:   countAt(polls, constrained),
		Panels:  recs,
	}
	if err := os.WriteFile(o.timeline, renderTimeline(tl), 0o644); err != nil {
		return nil, fmt.Errorf("-timeline: %w", err)
	}
	fmt.Fprintf(stderr, "timeline written to %s\n", o.timeline)
	return results, nil
}

// countAt is how many polls go to carrier c.
func countAt(polls []poll, c string) int {
	n := 0
	for _, p := range polls {
		if p.Carrier == c {
			n++
		}
	}
	return n
}

// modeHeads are the table's column heads.
var modeHeads = map[string]string{
	"local":      "local (asynq wiki pattern: each task waits its own hint)",
	"pause":      "pause (the plain shared pause: the article's algorithm alone)",
	"gate":       "gate, nothing configured",
	"gate+limit": "gate+limit (configuredLimits)",
}

// printBench writes the issues' table: per scenario and mode, requests per
// accepted poll, then wall time, as min–max over the runs; with -matrix,
// the goals' summary below it.
func printBench(w io.Writer, o options, run []mode, results []benchResult) {
	for _, line := range benchPreamble(o) {
		fmt.Fprintln(w, line)
	}
	fmt.Fprintln(w)
	benchTable(w, run, results)
	benchGoals(w, o, run, results)
}

// benchGoals writes, with -matrix, a blank line and the goals' summary
// (goals.go).
func benchGoals(w io.Writer, o options, run []mode, results []benchResult) {
	if !o.matrix {
		return
	}
	fmt.Fprintln(w)
	printGoals(w, o.runs, evaluateGoals(results, run))
}

// benchPreamble is what the table's figures are of: the workload, the
// settings and what the cells and the ideal mean, a line each.
func benchPreamble(o options) []string {
	polls := workload(o.polls, o.free, o.seed)
	nc := countAt(polls, constrained)
	return []string{
		fmt.Sprintf("%d polls (%d %s, %d %s without quota), %d workers, carrier latency %v, asynq DelayedTaskCheckInterval %v, seed %d, %d run(s) each",
			len(polls), nc, constrained, len(polls)-nc, free, o.workers, o.latency, o.delayedCheck, o.seed, o.runs),
		"cells: requests per accepted poll, wall time (min–max over runs); wall time runs from the start of the quota's first window, on a whole second, to the last poll done",
		fmt.Sprintf("ideal: when the quota answers the last of its %d polls if every request is sent at the earliest instant it accepts one (sim.Quota.IdealLatency)", nc),
	}
}

// benchTable writes the table itself, in Markdown: a row per scenario, a
// column per mode and the quota's ideal.
func benchTable(w io.Writer, run []mode, results []benchResult) {
	fmt.Fprint(w, "| cell | provider |")
	for _, m := range run {
		fmt.Fprintf(w, " %s |", modeHeads[m.Name])
	}
	fmt.Fprintln(w, " the quota's ideal |")
	fmt.Fprint(w, "|---|---|")
	for range run {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w, "---|")
	for _, r := range results {
		fmt.Fprintf(w, "| %s | %s |", r.sc.Name, r.sc.title())
		for _, m := range run {
			fmt.Fprintf(w, " %s |", benchCell(r.byMode[m.Name]))
		}
		fmt.Fprintf(w, " %s s |\n", strconv.FormatFloat(r.ideal.Seconds(), 'f', -1, 64))
	}
}

// benchCell is "1.04–1.06×, 21.1–22.0 s" over the runs of one mode, with
// the count of runs that did not complete every poll, if any.
func benchCell(runs []figures) string {
	if len(runs) == 0 {
		return "–"
	}
	var waste, wall []float64
	incomplete := 0
	for _, f := range runs {
		waste = append(waste, f.Waste)
		wall = append(wall, f.Wall.Seconds())
		if f.Completed != f.Polls {
			incomplete++
		}
	}
	cell := span(waste, "%.2f") + "×, " + span(wall, "%.1f") + " s"
	if incomplete > 0 {
		cell += fmt.Sprintf(" (%d run(s) incomplete)", incomplete)
	}
	return cell
}

// span is "min–max" in format, or one value when they print the same.
func span(v []float64, format string) string {
	lo, hi := fmt.Sprintf(format, slices.Min(v)), fmt.Sprintf(format, slices.Max(v))
	if lo == hi {
		return lo
	}
	return lo + "–" + hi
}
