package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// progress is the live line of the running mode on stderr: rewritten in
// place on a terminal, printed once per mode otherwise. A nil *progress
// prints nothing.
type progress struct {
	w      io.Writer
	tty    bool
	prefix string // what runs, before the mode's name (-bench: scenario and run)
}

// setPrefix sets what the lines say before the mode's name.
func (p *progress) setPrefix(s string) {
	if p != nil {
		p.prefix = s
	}
}

func (p *progress) update(mode string, done, total, requests, refused int, elapsed time.Duration) {
	if p == nil || !p.tty {
		return
	}
	fmt.Fprintf(p.w, "\r%s%-10s %4d/%d polls done  %5d requests  %4d refused  %5.1fs\x1b[K",
		p.prefix, mode, done, total, requests, refused, elapsed.Seconds())
}

func (p *progress) finish(f figures) {
	if p == nil {
		return
	}
	line := fmt.Sprintf("%s%-10s %4d/%d polls done  %5d requests  %4d refused  %5.1fs",
		p.prefix, f.Mode, f.Completed, f.Polls, f.Requests, f.Refused, f.Wall.Seconds())
	if p.tty {
		fmt.Fprintf(p.w, "\r%s\x1b[K\n", line)
		return
	}
	fmt.Fprintln(p.w, line)
}

// printTable writes the side-by-side table, one column per mode.
func printTable(w io.Writer, s settings, polls []poll, all []figures) {
	nFree := 0
	for _, p := range polls {
		if p.Carrier == free {
			nFree++
		}
	}
	fmt.Fprintf(w, "carrier %s: %s per credential, dialect %s; carrier %s: no quota; carrier latency %v\n",
		constrained, s.quota, s.dialect.Name, free, s.latency)
	fmt.Fprintf(w, "workload: %d polls (%d %s, %d %s), %d workers, seed %d\n\n",
		len(polls), len(polls)-nFree, constrained, nFree, free, s.workers, s.seed)

	// Right-aligned columns; the labels are padded to one width, so they
	// read left-aligned, and each value brings its own gap.
	tw := tabwriter.NewWriter(w, 0, 0, 0, ' ', tabwriter.AlignRight)
	const labelWidth = 38
	row := func(label string, cell func(f figures) string) {
		fmt.Fprintf(tw, "%-*s\t", labelWidth, label)
		for _, f := range all {
			fmt.Fprintf(tw, "   %s\t", cell(f))
		}
		fmt.Fprintln(tw)
	}
	num := func(get func(f figures) int) func(figures) string {
		return func(f figures) string { return fmt.Sprint(get(f)) }
	}
	secs := func(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

	row("", func(f figures) string { return f.Mode })
	row("polls completed", func(f figures) string { return fmt.Sprintf("%d/%d", f.Completed, f.Polls) })
	if anyOf(all, func(f figures) bool { return f.Archived > 0 }) {
		row("archived", num(func(f figures) int { return f.Archived }))
	}
	row("requests sent to the carrier", num(func(f figures) int { return f.Requests }))
	row("accepted", num(func(f figures) int { return f.Accepted }))
	row("refused (429: too many requests)", num(func(f figures) int { return f.Refused }))
	row("sent after the carrier had said \"wait\"", num(func(f figures) int { return f.IntoClosed }))
	row("handlers that set up a client", num(func(f figures) int { return f.Resolutions }))
	row("handlers not run: the task waited", num(func(f figures) int { return f.Skipped }))
	row("workers that waited in-process", num(func(f figures) int { return f.Held }))
	row("tasks of "+free+" (no quota) made to wait", num(func(f figures) int { return f.FreeDefer }))
	row(free+"'s last poll done after", func(f figures) string { return secs(f.FreeDone) })
	row("time to the last poll", func(f figures) string { return secs(f.Wall) })
	row("least time the quota allows", func(f figures) string { return secs(f.Ideal) })
	row("requests per accepted poll", func(f figures) string { return fmt.Sprintf("%.2fx", f.Waste) })
	tw.Flush()
}

func anyOf(all []figures, pred func(figures) bool) bool {
	for _, f := range all {
		if pred(f) {
			return true
		}
	}
	return false
}

// printJSON writes one JSON object per mode, one per line.
func printJSON(w io.Writer, all []figures) error {
	enc := json.NewEncoder(w)
	for _, f := range all {
		if err := enc.Encode(f); err != nil {
			return err
		}
	}
	return nil
}
