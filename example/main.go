// Command example runs one tracking workload three ways against a fake
// carrier that enforces a real quota, and prints what each way cost:
//
//	go run ./example                 fixed-window carrier, everything in-process
//	go run ./example -model bucket   token-bucket carrier
//	go run ./example -model sliding  sliding-window carrier (its hint: the whole window)
//	go run ./example -headers        the carrier advertises its budget on every response
//	go run ./example -json           final figures as JSON, one object per line
//	go run ./example -ui :8080       also serve asynqmon, the inspector and /metrics, until Ctrl-C
//	go run ./example -redis redis://localhost:6379/0
//	go run ./example -bench -runs 3 -redis redis://127.0.0.1:6390/0
//	go run ./example -serve-carrier 127.0.0.1:8099 -model bucket -rate 8 -burst 10
//	go run ./example -model gcra -rate 8 -burst 10 -dialect until-full
//	go run ./example -bench -matrix -cells fixed/github,bucket/discord -runs 2
//	go run ./example -priority -json  a sweep and a person's polls, with and without classes
//	go run ./example -bench -timeline docs/timeline.svg  one cell's requests over time, as an SVG
//	go run ./example -bench -matrix -runs 2 -out measurements.md  the table also as Markdown
//
// -bench -matrix runs every provider shape × dialect cell of bench.go's
// matrix (internal/sim's models and dialects) in the modes local, pause,
// gate and gate+limit; -cells selects some. Below its table it prints the
// matrix's goals (goals.go), a line each, naming the cells that miss one
// in their worst of -runs. The carrier is internal/sim's Server: -model
// picks its shape, -dialect how it speaks.
//
// -bench runs the issues' measurement instead of one table: every scenario
// of bench.go (fixed window 40 per 5 s, token bucket 8/s burst 10, sliding
// window 40 per 5 s with -headers, and the first two with -headers), each
// in every mode, 200 polls all at the constrained carrier, 20 workers,
// asynq's DelayedTaskCheckInterval 1 s; it prints requests per accepted poll
// and wall time per mode beside the quota's ideal, as min–max over -runs.
// -out FILE also writes that report as Markdown (measurements.go): the
// command that produced it, the date, the runs and the table.
//
// -bench -timeline FILE runs one cell of the matrix (-cells, default
// fixed/retry-after) once in the modes local and gate and draws, in one
// SVG (timeline.go), every request its carrier received over time, the
// refusals, what the gate held the scope for and the quota's line.
//
// The modes, run one after another on the same seed and quota, each on fresh
// state (fresh carrier counters, its own asynq queue and gate key prefix):
//
//	local       asynq's wiki pattern: the refused task waits the hint, alone
//	pause       the plain shared pause (pause.go; -bench default only)
//	gate        quotagate: one refusal pauses the credential for every worker
//	gate+limit  quotagate with Config.Limits at the carrier's quota
//
// Nothing needs installing: Redis is an embedded miniredis unless -redis is
// given, and the two carriers are HTTP servers on 127.0.0.1. With -redis the
// run uses queues and keys of its own (named after the run) and never
// flushes; it deletes its queues when done, unless -ui keeps them to watch.
//
// With -ui, each mode's queue (local, gate, gate+limit) shows in asynqmon;
// deferred polls wait in a queue's Retry tab, and their last error is the
// gate's Deferral message, which says why and until when; the inspector
// (/quotagate/) shows the paused scopes and /metrics the gates' counters.
// Pauses of a second are mostly waited out in-process (Tuning.MaxHold), so
// for a good look use a longer window:
// go run ./example -ui :8080 -window 10s -rate 30 -polls 100.
//
// The constrained carrier's windows start with each mode's run, on a whole
// second. -serve-carrier serves that carrier alone, for another job queue
// to be measured against (serve.go).
//
// Files: carrier.go is the fake carrier (internal/sim's Server) and quota.go
// maps the flags to its quota and dialect; pause.go is the baseline;
// run.go runs one mode (asynq server, gate); measure.go is the bookkeeping
// behind the figures, report.go prints them; bench.go is -bench and
// goals.go the matrix's goals; ui.go serves asynqmon.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/sim"
)

func main() {
	if err := realMain(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	settings
	modes     string
	redis     string
	ui        string
	jsonOut   bool
	bench     bool
	runs      int
	scenarios string
	matrix    bool
	cells     string
	serve     string
	model     string        // -model, before shapeOf
	dialect   string        // -dialect; "": defaultDialect
	headers   bool          // -headers
	priority  bool          // -priority (priority.go)
	every     time.Duration // -every: the person's polls, -priority
	timeline  string        // -timeline: the SVG file to draw
	out       string        // -out: the Markdown file of the report
	args      []string      // the command's arguments, for -out
}

// The defaults that differ between the demo and -bench: the demo keeps
// asynq's forwarder fast and shows that the free carrier's polls are not
// held up by the constrained one's pauses; -bench measures the issues'
// setting (DelayedTaskCheckInterval 1 s, every poll at the constrained
// carrier, so the ideal is the quota's alone: 23.75 s for the bucket).
const (
	// 500 ms, the README's recommendation: below Tuning.MaxHold (1.5 s),
	// so a task deferred by a pause is back, holding, before the pause
	// ends (asynq's default of 5 s would add up to 5 s to every pause),
	// for two cheap Redis calls a second per server.
	demoDelayedCheck  = 500 * time.Millisecond
	benchDelayedCheck = time.Second
	demoFree          = 15 // percent
	benchFree         = 0
	demoTimeout       = 3 * time.Minute
	// 90 s: four times the slowest ideal of the matrix (24.9 s), so that a
	// cell that stalls costs a minute and a half, not three.
	matrixTimeout = 90 * time.Second
)

func parseFlags(args []string, stderr io.Writer) (options, error) {
	o := options{args: args}
	fs := flag.NewFlagSet("example", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.model, "model", "fixed", "the carrier's quota model: fixed (N requests per window), bucket (token bucket), sliding (N in any window), or any internal/sim shape: "+shapeNames())
	fs.IntVar(&o.quota.Rate, "rate", 10, "fixed, sliding: requests per window; bucket, gcra: tokens per second; concurrency: requests in flight")
	fs.IntVar(&o.quota.Burst, "burst", 10, "bucket: its size; gcra: nginx's burst (burst+1 at once)")
	fs.DurationVar(&o.quota.Window, "window", time.Second, "fixed, sliding: the window's length")
	fs.BoolVar(&o.headers, "headers", false, "the carrier advertises its budget on every response (X-RateLimit-Limit, -Remaining, -Reset in delta seconds) and sends Retry-After on 429: -dialect delta (sliding: httprate)")
	fs.StringVar(&o.dialect, "dialect", "", "how the carrier speaks, an internal/sim dialect: "+dialectNames()+" (default prose; sliding: window; with -headers delta; sliding: httprate)")
	fs.IntVar(&o.polls, "polls", 200, "tracking numbers to poll")
	fs.IntVar(&o.free, "free", -1, fmt.Sprintf("percent of the polls at the carrier without quota (default %d, with -bench %d)", demoFree, benchFree))
	fs.DurationVar(&o.delayedCheck, "delayed-check", 0, fmt.Sprintf("asynq DelayedTaskCheckInterval (default %v, with -bench %v)", demoDelayedCheck, benchDelayedCheck))
	fs.IntVar(&o.workers, "workers", 20, "asynq Concurrency")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the workload and of the gate's jitter")
	fs.DurationVar(&o.latency, "latency", 25*time.Millisecond, "the carriers' answer time")
	fs.DurationVar(&o.timeout, "timeout", 0, fmt.Sprintf("give up a mode after this long (default %v, with -matrix %v)", demoTimeout, matrixTimeout))
	fs.DurationVar(&o.hold, "hold", 0, "quotagate Tuning.MaxHold: longest in-process wait (0: the default; negative: never)")
	fs.IntVar(&o.holders, "holders", 0, "quotagate Tuning.MaxHolders: workers per scope that may wait out a pause in-process (0: the default)")
	fs.StringVar(&o.modes, "modes", "", "modes to run, comma-separated: local, pause, gate, gate+limit (default local,gate,gate+limit; with -bench all four)")
	fs.StringVar(&o.redis, "redis", "", "use this Redis (redis://host:port/db) instead of an embedded one")
	fs.StringVar(&o.ui, "ui", "", "serve asynqmon (/), the gates' inspector (/quotagate/) and /metrics on this address (e.g. :8080) and keep serving until Ctrl-C; to see deferrals in the first seconds, run the gate mode alone on a long window: -ui :8080 -modes gate -window 10s -rate 30 -polls 100")
	fs.BoolVar(&o.jsonOut, "json", false, "print the final figures as JSON (one object per mode (and run) per line) instead of the table")
	fs.BoolVar(&o.bench, "bench", false, "run the benchmark scenarios (see -scenarios) instead of one table")
	fs.IntVar(&o.runs, "runs", 1, "-bench: runs of each scenario and mode; the table shows min–max, -matrix's goals the worst run")
	fs.StringVar(&o.scenarios, "scenarios", scenarioNames(), "-bench: scenarios to run, comma-separated")
	fs.BoolVar(&o.matrix, "matrix", false, "-bench over every provider shape × dialect cell of bench.go's matrix (implies -bench; see -cells)")
	fs.StringVar(&o.cells, "cells", "all", "-matrix: cells to run, comma-separated (shape/dialect, e.g. fixed/github,bucket/discord), or all")
	fs.BoolVar(&o.priority, "priority", false, "run the priority scenario (priority.go): a sweep of -polls background polls and a person's poll every -every, without and with classes; modes gate and gate+limit (default gate+limit)")
	fs.DurationVar(&o.every, "every", 2*time.Second, "-priority: how often the person triggers a poll")
	fs.StringVar(&o.timeline, "timeline", "", "run one cell of the matrix (-cells, default "+timelineCell+") once in the modes local and gate, each on a fresh Redis prefix, and draw what its carrier received in this SVG file (implies -bench)")
	fs.StringVar(&o.out, "out", "", "-bench, -matrix, -timeline: also write the report to this Markdown file (# Measurements: the command, the date, the runs and the table)")
	fs.StringVar(&o.serve, "serve-carrier", "", "serve only the constrained carrier (-model, -rate, -burst, -window, -headers, -latency) on this address, for another queue to be measured against; see serve.go")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := timelineFlags(fs, &o); err != nil {
		return o, err
	}
	o.bench = o.bench || o.matrix
	if o.bench && o.serve != "" {
		return o, errors.New("-serve-carrier does not go with -bench")
	}
	if o.priority && (o.bench || o.serve != "" || o.ui != "") {
		return o, errors.New("-priority does not go with -bench, -serve-carrier or -ui")
	}
	if o.priority && o.every <= 0 {
		return o, fmt.Errorf("-every %v: want a positive interval", o.every)
	}
	if err := benchFlags(fs, o); err != nil {
		return o, err
	}
	o.free = pick(o.free, -1, demoFree, benchFree, o.bench)
	o.delayedCheck = pick(o.delayedCheck, 0, demoDelayedCheck, benchDelayedCheck, o.bench)
	o.timeout = pick(o.timeout, 0, demoTimeout, matrixTimeout, o.matrixCells())
	if o.modes == "" {
		o.modes = pick("", "", "local,gate,gate+limit", "local,pause,gate,gate+limit", o.bench)
		if o.priority {
			o.modes = "gate+limit"
		}
	}
	shape, err := shapeOf(o.model)
	if err != nil {
		return o, err
	}
	o.quota.Shape = shape
	if err := o.quota.Validate(); err != nil {
		return o, err
	}
	if o.dialect == "" {
		o.dialect = defaultDialect(shape, o.headers)
	}
	d, ok := sim.DialectNamed(o.dialect)
	if !ok {
		return o, fmt.Errorf("-dialect %q: want one of %s", o.dialect, dialectNames())
	}
	o.settings.dialect = d
	switch {
	case o.polls < 1 || o.workers < 1:
		return o, errors.New("-polls and -workers must be at least 1")
	case o.free < 0 || o.free > 100:
		return o, fmt.Errorf("-free %d: want a percentage, 0 to 100", o.free)
	case o.delayedCheck <= 0:
		return o, fmt.Errorf("-delayed-check %v: want a positive interval", o.delayedCheck)
	case o.runs < 1:
		return o, fmt.Errorf("-runs %d: want at least 1", o.runs)
	}
	return o, nil
}

// benchFlags reports -out without -bench, and a quota flag given with
// -bench: the scenarios set the quota, so it would be ignored.
func benchFlags(fs *flag.FlagSet, o options) error {
	if !o.bench && o.out != "" {
		return errors.New("-out goes with -bench, -matrix or -timeline")
	}
	if !o.bench {
		return nil
	}
	var conflict error
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "model", "rate", "burst", "window", "headers", "dialect", "ui":
			conflict = fmt.Errorf("-%s does not go with -bench (the scenarios set the quota; see -scenarios)", f.Name)
		}
	})
	return conflict
}

// matrixCells reports that -bench runs cells of the matrix (-matrix,
// -timeline).
func (o options) matrixCells() bool { return o.matrix || o.timeline != "" }

// timelineFlags checks -timeline's flags and sets its cell and modes (one
// cell of the matrix, once, in the modes local and gate); -timeline
// implies -bench.
func timelineFlags(fs *flag.FlagSet, o *options) error {
	if o.timeline == "" {
		return nil
	}
	o.bench = true
	var conflict error
	cells := false
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "matrix", "scenarios", "runs", "modes":
			conflict = fmt.Errorf("-%s does not go with -timeline (one cell of the matrix, once, in the modes local and gate)", f.Name)
		case "cells":
			cells = true
		}
	})
	switch {
	case conflict != nil:
		return conflict
	case !cells:
		o.cells = timelineCell
	case o.cells == "all" || strings.Contains(o.cells, ","):
		return fmt.Errorf("-timeline -cells %q: want one cell", o.cells)
	}
	o.modes = "local,gate"
	return nil
}

// pick returns v unless it is unset, else the default of the demo or of
// -bench.
func pick[T comparable](v, unset, demo, bench T, isBench bool) T {
	switch {
	case v != unset:
		return v
	case isBench:
		return bench
	}
	return demo
}

// selectModes returns the modes named in list, in their usual order.
func selectModes(list string) ([]mode, error) {
	return selectNamed(list, modes, func(m mode) string { return m.Name }, "mode", "local, pause, gate, gate+limit")
}

// selectNamed returns the items of all named in the comma-separated list,
// in the order of all; what and known name them in errors.
func selectNamed[T any](list string, all []T, name func(T) string, what, known string) ([]T, error) {
	want := map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		if n = strings.TrimSpace(n); n != "" {
			want[n] = true
		}
	}
	var out []T
	for _, it := range all {
		if want[name(it)] {
			out = append(out, it)
			delete(want, name(it))
		}
	}
	for n := range want {
		return nil, fmt.Errorf("unknown %s %q (want some of %s)", what, n, known)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no %s to run", what)
	}
	return out, nil
}

func realMain(args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	run, err := selectModes(o.modes)
	if err != nil {
		return err
	}
	list, err := benchList(o)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.serve != "" {
		return serveCarrier(ctx, o.serve, o.settings, stdout)
	}

	e, closeEnv, err := openEnv(o)
	if err != nil {
		return err
	}
	defer closeEnv()

	if o.ui != "" {
		stopUI, err := serveUI(o.ui, &e, stderr)
		if err != nil {
			return err
		}
		defer stopUI()
	}

	prog := &progress{w: stderr, tty: isTerminal(stderr)}
	if o.priority {
		_, err := runPriority(ctx, e, o, run, stdout, prog)
		return err
	}
	if o.bench {
		return runBenchCommand(ctx, e, o, list, run, stdout, stderr, prog)
	}
	polls := workload(o.polls, o.free, o.seed)
	var all []figures
	for _, m := range run {
		f, err := runMode(ctx, e, m.Name, m, o.settings, polls, prog)
		if err != nil {
			return err
		}
		all = append(all, f)
	}

	if o.jsonOut {
		if err := printJSON(stdout, all); err != nil {
			return err
		}
	} else {
		printTable(stdout, o.settings, polls, all)
	}

	if o.ui != "" {
		fmt.Fprintf(stderr, "asynqmon, the inspector and /metrics still serving on %s; Ctrl-C to stop\n", o.ui)
		<-ctx.Done()
	}
	return nil
}

// benchList is the scenarios -bench runs: of -scenarios, or with -matrix
// and -timeline the cells of the matrix; none without -bench.
func benchList(o options) ([]scenario, error) {
	if !o.bench {
		return nil, nil
	}
	all, names := scenarios, o.scenarios
	if o.matrixCells() {
		all, names = matrix, o.cells
	}
	return selectScenarios(names, all)
}

// runBenchCommand runs -bench: its table, or with -timeline one cell's
// timeline too; with -out it also writes the report as Markdown.
func runBenchCommand(ctx context.Context, e env, o options, list []scenario, run []mode, stdout, stderr io.Writer, prog *progress) error {
	var results []benchResult
	var err error
	if o.timeline != "" {
		results, err = runTimeline(ctx, e, o, list[0], run, stdout, stderr, prog)
	} else {
		results, err = runBench(ctx, e, o, list, run, stdout, prog)
	}
	if err != nil || o.out == "" {
		return err
	}
	return writeMeasurementsFile(o, run, results, time.Now(), stderr)
}

// openEnv connects to the Redis of the run: the one of -redis, with names
// unique to this run, or a fresh embedded miniredis.
func openEnv(o options) (env, func(), error) {
	if o.redis != "" {
		opt, err := asynq.ParseRedisURI(o.redis)
		if err != nil {
			return env{}, nil, fmt.Errorf("-redis: %w", err)
		}
		rdb, ok := opt.MakeRedisClient().(redis.UniversalClient)
		if !ok {
			return env{}, nil, fmt.Errorf("-redis: unsupported connection %T", opt)
		}
		if err := rdb.Ping(context.Background()).Err(); err != nil {
			rdb.Close()
			return env{}, nil, fmt.Errorf("-redis: %w", err)
		}
		id := fmt.Sprintf("%x", time.Now().UnixNano())
		return env{
			opt: opt,
			rdb: rdb,
			names: func(label string) (string, string) {
				n := "quotagate-demo:" + id + ":" + label
				return n, n
			},
			keep:   o.ui != "",
			remove: true,
		}, func() { rdb.Close() }, nil
	}

	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		return env{}, nil, fmt.Errorf("embedded redis: %w", err)
	}
	// miniredis's TIME follows the wall clock, but its TTLs move only with
	// FastForward, so nothing expires here. The gate does not mind (it
	// compares deadlines with TIME); advancing TTLs from a ticker would be
	// wrong, as it would also age keys set since the previous tick and
	// expire pauses early.
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	return env{
			opt:   asynq.RedisClientOpt{Addr: m.Addr()},
			rdb:   rdb,
			names: func(label string) (string, string) { return label, "quotagate:" + label },
		}, func() {
			rdb.Close()
			m.Close()
		}, nil
}

// isTerminal reports whether w is a character device (a terminal), where
// the progress line can be rewritten in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
