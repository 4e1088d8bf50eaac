package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// This file is -bench: the measurement of issues 8 and 9, every scenario in
// every mode, printed as the issues' table.

// A scenario is one provider of the benchmark.
type scenario struct {
	Name    string // for -scenarios and the JSON
	Quota   quotaSpec
	Headers bool // the carrier advertises its budget (-headers)
}

// scenarios are the providers of the issues' table, at their quotas: a
// fixed window of 40 per 5 s, a token bucket of 8/s with burst 10 (whose
// refusals say "1 second"), a sliding window of 40 per 5 s whose refusals
// always say the whole window while it reports its budget, and the first two
// again with their budget in headers.
var scenarios = []scenario{
	{Name: "fixed", Quota: quotaSpec{Model: modelFixed, Rate: 40, Window: 5 * time.Second}},
	{Name: "bucket", Quota: quotaSpec{Model: modelBucket, Rate: 8, Burst: 10}},
	{Name: "sliding+headers", Quota: quotaSpec{Model: modelSliding, Rate: 40, Window: 5 * time.Second}, Headers: true},
	{Name: "fixed+headers", Quota: quotaSpec{Model: modelFixed, Rate: 40, Window: 5 * time.Second}, Headers: true},
	{Name: "bucket+headers", Quota: quotaSpec{Model: modelBucket, Rate: 8, Burst: 10}, Headers: true},
}

// title describes a scenario in the table.
func (sc scenario) title() string {
	if sc.Headers {
		return sc.Quota.String() + "; budget in headers on every response"
	}
	return sc.Quota.String() + "; hint in prose only"
}

func scenarioNames() string {
	names := make([]string, len(scenarios))
	for i, sc := range scenarios {
		names[i] = sc.Name
	}
	return strings.Join(names, ",")
}

// selectScenarios returns the scenarios named in list, in their usual order.
func selectScenarios(list string) ([]scenario, error) {
	return selectNamed(list, scenarios, func(sc scenario) string { return sc.Name }, "scenario", scenarioNames())
}

// benchResult is what the runs of one scenario measured, by mode.
type benchResult struct {
	sc     scenario
	ideal  time.Duration
	byMode map[string][]figures
}

// runBench runs every scenario in every mode, o.runs times, each run on
// fresh state, and prints the table (or, with -json, every run's figures).
// The runs are interleaved (run 1 of every scenario, then run 2, ...) so a
// slow spell of a shared machine does not fall on one scenario only.
func runBench(ctx context.Context, e env, o options, list []scenario, run []mode, stdout io.Writer, prog *progress) ([]benchResult, error) {
	results := make([]benchResult, len(list))
	for i, sc := range list {
		results[i] = benchResult{sc: sc, byMode: map[string][]figures{}}
	}
	for n := 1; n <= o.runs; n++ {
		for i, sc := range list {
			s := o.settings
			s.quota, s.headers = sc.Quota, sc.Headers
			polls := workload(s.polls, s.free, s.seed)
			results[i].ideal = s.quota.ideal(countAt(polls, constrained))
			for _, m := range run {
				prog.setPrefix(fmt.Sprintf("%s #%d ", sc.Name, n))
				f, err := runMode(ctx, e, fmt.Sprintf("%s.%d.%s", sc.Name, n, m.Name), m, s, polls, prog)
				switch {
				case errors.Is(err, errTimedOut):
					// Counted as incomplete in the table; the next runs go on.
				case err != nil:
					return nil, fmt.Errorf("scenario %s, run %d: %w", sc.Name, n, err)
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
	"gate":       "gate, nothing configured",
	"gate+limit": "gate+limit (configuredLimit)",
}

// printBench writes the issues' table: per scenario and mode, requests per
// accepted poll, then wall time, as min–max over the runs.
func printBench(w io.Writer, o options, run []mode, results []benchResult) {
	polls := workload(o.polls, o.free, o.seed)
	nc := countAt(polls, constrained)
	fmt.Fprintf(w, "%d polls (%d %s, %d %s without quota), %d workers, carrier latency %v, asynq DelayedTaskCheckInterval %v, seed %d, %d run(s) each\n",
		len(polls), nc, constrained, len(polls)-nc, free, o.workers, o.latency, o.delayedCheck, o.seed, o.runs)
	fmt.Fprintln(w, "cells: requests per accepted poll, wall time (min–max over runs); wall time runs from the start of the quota's first window, on a whole second, to the last poll done")
	fmt.Fprintf(w, "ideal: when the quota accepts the last of its %d polls if every request is sent at the earliest instant it accepts one (quotaSpec.ideal)\n\n", nc)

	fmt.Fprint(w, "| provider |")
	for _, m := range run {
		fmt.Fprintf(w, " %s |", modeHeads[m.Name])
	}
	fmt.Fprintln(w, " the quota's ideal |")
	fmt.Fprint(w, "|---|")
	for range run {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w, "---|")
	for _, r := range results {
		fmt.Fprintf(w, "| %s |", r.sc.title())
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
