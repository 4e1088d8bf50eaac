package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/hibiken/asynq"

	"github.com/quotagate/quotagate"
	"github.com/quotagate/quotagate/internal/sim"
	"github.com/quotagate/quotagate/tracking"
)

// -priority: a sweep of -polls background polls saturates the constrained
// carrier while a person triggers one poll every -every on a queue of its
// own, which asynq serves first (strict priority). It runs twice, without
// classes (every poll spends the quota first come, first served) and with
// them (the person's queue is one of Config.InteractiveQueues, so the sweep
// leaves Config.Reserve of the quota to it), and prints per run the time
// from enqueue to done of the person's polls, the sweep's throughput and
// the requests per accepted poll.

// priorityFigures are the results of one run of the priority scenario.
type priorityFigures struct {
	Scenario       string  `json:"scenario"` // "priority"
	Run            int     `json:"run"`
	Mode           string  `json:"mode"` // gate (nothing configured) or gate+limit
	Classes        bool    `json:"classes"`
	InteractiveP50 float64 `json:"interactive_p50_s"`
	InteractiveP99 float64 `json:"interactive_p99_s"`
	InteractiveMax float64 `json:"interactive_max_s"`
	SweepPerS      float64 `json:"sweep_polls_per_s"`
	Waste          float64 `json:"requests_per_accepted"`
	QuotaPerS      float64 `json:"quota_polls_per_s"`
	Interactive    int     `json:"interactive_polls"`
	Sweep          int     `json:"sweep_polls"`
	SweepDone      int     `json:"sweep_done"`
	WallS          float64 `json:"wall_seconds"`
}

// priorityRun is one run in progress: when each poll was enqueued and done.
type priorityRun struct {
	mu       sync.Mutex
	enqueued map[string]time.Time // interactive polls, by number
	waits    []time.Duration      // interactive polls: enqueue to done
	sweep    int                  // sweep polls done
	lastDone time.Time            // of the sweep's last poll
}

func (p *priorityRun) report(_ context.Context, poll tracking.Poll, _ tracking.Result) error {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if t, ok := p.enqueued[poll.Number]; ok {
		p.waits = append(p.waits, now.Sub(t))
		return nil
	}
	p.sweep++
	p.lastDone = now
	return nil
}

// runPriority runs the scenario -runs times in each gate mode of run, with
// and without classes, and prints the figures.
func runPriority(ctx context.Context, e env, o options, run []mode, stdout io.Writer, prog *progress) ([]priorityFigures, error) {
	var all []priorityFigures
	for _, m := range run {
		if !m.Gate {
			return nil, fmt.Errorf("-priority runs the gate modes (gate, gate+limit), not %s", m.Name)
		}
	}
	for i := range o.runs {
		for _, m := range run {
			for _, classes := range []bool{false, true} {
				label := fmt.Sprintf("priority-%s-%v-%d", m.Name, classes, i+1)
				f, err := priorityOnce(ctx, e, label, m, classes, o)
				f.Run = i + 1
				if err != nil && !errors.Is(err, errTimedOut) {
					return all, err
				}
				if prog != nil {
					fmt.Fprintf(prog.w, "%s classes=%v: interactive p50 %.2fs p99 %.2fs max %.2fs, sweep %.1f polls/s (%d/%d), %.2f requests per accepted\n",
						m.Name, classes, f.InteractiveP50, f.InteractiveP99, f.InteractiveMax, f.SweepPerS, f.SweepDone, f.Sweep, f.Waste)
				}
				all = append(all, f)
			}
		}
	}
	if o.jsonOut {
		enc := json.NewEncoder(stdout)
		for _, f := range all {
			if err := enc.Encode(f); err != nil {
				return all, err
			}
		}
		return all, nil
	}
	printPriority(stdout, o, all)
	return all, nil
}

// priorityOnce is one run: a fresh carrier, queues and gate prefix.
func priorityOnce(ctx context.Context, e env, label string, m mode, classes bool, o options) (priorityFigures, error) {
	s := o.settings
	iq, prefix := e.names(label + "-interactive")
	sq, _ := e.names(label + "-sweep")
	f := priorityFigures{Scenario: "priority", Mode: m.Name, Classes: classes, Sweep: s.polls, QuotaPerS: quotaPerSecond(s)}

	start := time.Now().Truncate(time.Second).Add(time.Second)
	acme := newCarrier(constrained, carrierOptions{quota: &s.quota, dialect: s.dialect, latency: s.latency, origin: start}, acmeCredential)
	defer acme.Close()
	swift := newCarrier(free, carrierOptions{latency: s.latency}, swiftCredential)
	defer swift.Close()
	carrier := tracking.NewCarrier(constrained, acmeCredential)

	client := asynq.NewClient(e.opt)
	defer client.Close()
	pr := &priorityRun{enqueued: map[string]time.Time{}}
	for _, p := range workload(s.polls, 0, s.seed) {
		if _, err := tracking.Enqueue(ctx, client, carrier, p.Number, asynq.Queue(sq)); err != nil {
			return f, err
		}
	}

	gcfg := quotagate.Config{Prefix: prefix, Logger: slog.New(slog.DiscardHandler), Reserve: -1,
		Tuning: quotagate.Tuning{MaxHold: s.hold, MaxHolders: s.holders}}
	if classes {
		gcfg.Reserve, gcfg.InteractiveQueues = 0, []string{iq} // the default reserve
	}
	if ls := configuredLimits(s.quota); len(ls) > 0 && m.Limit {
		gcfg.Limits = map[string][]quotagate.Limit{constrained: ls}
	}
	g := quotagate.New(e.rdb, gcfg)
	defer g.Close()
	transport := &http.Transport{MaxIdleConnsPerHost: 2 * s.workers}
	defer transport.CloseIdleConnections()
	r := &run{mode: m, s: s, total: s.polls}
	mux := asynq.NewServeMux()
	mux.Use(g.Middleware())
	mux.Handle(tracking.TypePoll, &tracking.Handler{Resolver: newResolver(r, g.Transport(transport), acme, swift), Report: pr.report})
	srv := asynq.NewServer(e.opt, asynq.Config{
		Concurrency:              s.workers,
		Queues:                   map[string]int{iq: 6, sq: 1},
		StrictPriority:           true, // the person's queue first, as the users run it
		DelayedTaskCheckInterval: s.delayedCheck,
		TaskCheckInterval:        50 * time.Millisecond,
		IsFailure:                quotagate.IsFailure,
		RetryDelayFunc:           g.RetryDelay(nil),
		ShutdownTimeout:          3 * time.Second,
		LogLevel:                 asynq.ErrorLevel,
	})
	if err := sleepUntil(ctx, start); err != nil {
		return f, err
	}
	if err := srv.Start(mux); err != nil {
		return f, fmt.Errorf("start asynq server: %w", err)
	}
	defer func() {
		srv.Shutdown()
		if e.remove && !e.keep {
			removeQueue(e, iq)
			removeQueue(e, sq)
			removeKeys(e, prefix)
		}
	}()

	// The person: one poll every -every while the sweep runs.
	err := func() error {
		tick := time.NewTicker(o.every)
		defer tick.Stop()
		timeout := time.NewTimer(s.timeout)
		defer timeout.Stop()
		n := 0
		for {
			pr.mu.Lock()
			done, asked, waited := pr.sweep, len(pr.enqueued), len(pr.waits)
			pr.mu.Unlock()
			if done >= s.polls && waited >= asked {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-timeout.C:
				return fmt.Errorf("priority %s: %d of %d sweep polls done after %v: %w", label, done, s.polls, s.timeout, errTimedOut)
			case <-tick.C:
				if done >= s.polls {
					continue
				}
				n++
				number := fmt.Sprintf("PX%010d", n)
				pr.mu.Lock()
				pr.enqueued[number] = time.Now()
				pr.mu.Unlock()
				if _, err := tracking.Enqueue(ctx, client, carrier, number, asynq.Queue(iq)); err != nil {
					return err
				}
			}
		}
	}()

	pr.mu.Lock()
	defer pr.mu.Unlock()
	a := acme.snapshot()
	f.Interactive, f.SweepDone = len(pr.enqueued), pr.sweep
	f.InteractiveP50, f.InteractiveP99, f.InteractiveMax = quantile(pr.waits, 0.5), quantile(pr.waits, 0.99), quantile(pr.waits, 1)
	if !pr.lastDone.IsZero() {
		f.WallS = pr.lastDone.Sub(start).Seconds()
		f.SweepPerS = round2(float64(pr.sweep) / f.WallS)
		f.WallS = round2(f.WallS)
	}
	if a.Accepted > 0 {
		f.Waste = round2(float64(a.Requests) / float64(a.Accepted))
	}
	return f, err
}

// quantile is the q-quantile of ds in seconds (nearest rank), 0 if none.
func quantile(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return round2(s[max(i, 0)].Seconds())
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }

// quotaPerSecond is the constrained carrier's throughput: its rate per
// window, or its bucket's refill.
func quotaPerSecond(s settings) float64 {
	switch s.quota.Shape {
	case sim.TokenBucket, sim.GCRA, sim.GCRADelay:
		return float64(s.quota.Rate)
	}
	return round2(float64(s.quota.Rate) / s.quota.Window.Seconds())
}

// printPriority writes one line per run.
func printPriority(w io.Writer, o options, all []priorityFigures) {
	fmt.Fprintf(w, "carrier %s: %s per credential, dialect %s, latency %v; sweep %d polls, a person's poll every %v; %d workers\n\n",
		constrained, o.quota, o.dialect, o.latency, o.polls, o.every, o.workers)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tmode\tclasses\tinteractive p50\tp99\tmax\tsweep polls/s\tquota polls/s\trequests per accepted\t")
	for _, f := range all {
		fmt.Fprintf(tw, "%d\t%s\t%v\t%.2fs\t%.2fs\t%.2fs\t%.2f\t%.2f\t%.2f\t\n", f.Run, f.Mode, f.Classes,
			f.InteractiveP50, f.InteractiveP99, f.InteractiveMax, f.SweepPerS, f.QuotaPerS, f.Waste)
	}
	tw.Flush()
}
