// Command quotagate reads and steers the pauses a quotagate Gate keeps in
// Redis: which scopes are paused, until when, and how far their limit is
// spent; it pauses a scope by hand (during a provider's incident) or lifts a
// pause.
//
//	go install github.com/quotagate/quotagate/cmd/quotagate@latest
//	quotagate [flags] COMMAND [ARGS]
//
// Commands:
//
//	pauses                           every pause in force
//	state PROVIDER ACCOUNT           one scope's pause and limit backlog
//	pause PROVIDER ACCOUNT DURATION  pause a scope (monotonic: never shortens one)
//	resume PROVIDER ACCOUNT          lift a scope's pause now
//
// Flags, before the command: -redis URL (redis:// or rediss://, default
// redis://127.0.0.1:6379/0), -cluster (the URL names a node of a Redis
// Cluster; more seed nodes with ?addr=host:port), -prefix (the Gate's
// Config.Prefix, default quotagate), -json, -timeout (default 10s).
//
// ACCOUNT is the Scope's Account as the application sets it (often a
// credential's Fingerprint, "fp:…"); an empty argument is the empty account.
// Exit status: 0 done, 1 Redis failed or could not be reached, 2 bad usage (a
// flag, an argument or the URL).
//
// The command uses the library's Gate for everything, so its key names and
// scripts are the ones the workers use: it lists with SCAN on every master
// (never KEYS) and reads each pause on Redis TIME.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// Exit statuses.
const (
	exitOK    = 0
	exitRedis = 1 // Redis unreachable, failing, or an incomplete listing
	exitUsage = 2 // a bad flag, argument or URL
)

// maxManualPause is the longest pause the command records: the workers'
// default Config.MaxPause. A worker treats a deadline farther ahead than its
// own MaxPause as malformed, that is open, so a longer manual pause would
// lift itself.
const maxManualPause = 12 * time.Hour

const usage = `usage: quotagate [flags] COMMAND [ARGS]

Reads and steers the pauses a quotagate Gate keeps in Redis.

Commands:
  pauses                           every pause in force: provider, account,
                                   deadline, remaining time, limit backlog
  state PROVIDER ACCOUNT           one scope's pause and limit backlog
  pause PROVIDER ACCOUNT DURATION  pause a scope for DURATION (e.g. 10m, 1s..12h);
                                   monotonic: a later deadline in force stays
  resume PROVIDER ACCOUNT          lift a scope's pause now

ACCOUNT is the scope's account as the application sets it (often a
fingerprint, fp:...); '' is the empty account.

Flags:
`

const usageTail = `
Exit status: 0 done, 1 Redis failed or could not be reached, 2 bad usage.
`

// config is the parsed command line.
type config struct {
	redisURL string
	cluster  bool
	prefix   string
	json     bool
	timeout  time.Duration
	command  string
	args     []string
}

// usageError is a bad flag, argument or URL: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func parse(args []string, stdout io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("quotagate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.redisURL, "redis", "redis://127.0.0.1:6379/0", "Redis `URL`: redis://[user:password@]host:port/db or rediss:// for TLS")
	fs.BoolVar(&c.cluster, "cluster", false, "the URL names a node of a Redis Cluster (more seeds: ?addr=host:port&addr=...)")
	fs.StringVar(&c.prefix, "prefix", "quotagate", "the Gate's key `prefix` (Config.Prefix)")
	fs.BoolVar(&c.json, "json", false, "print JSON instead of a table")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "give up after this long")
	fs.Usage = func() {} // printed on -h only; errors get one line
	help := func() {
		fmt.Fprint(stdout, usage)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
		fmt.Fprint(stdout, usageTail)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			help()
			return c, err
		}
		return c, usageError{err.Error()}
	}
	if c.timeout <= 0 {
		return c, usageError{"-timeout must be positive"}
	}
	if fs.NArg() == 0 {
		return c, usageError{"missing COMMAND (pauses, state, pause, resume; -h for help)"}
	}
	c.command, c.args = fs.Arg(0), fs.Args()[1:]
	want := map[string]int{"pauses": 0, "state": 2, "pause": 3, "resume": 2}
	n, ok := want[c.command]
	switch {
	case c.command == "help":
		help()
		return c, flag.ErrHelp
	case !ok:
		return c, usageError{fmt.Sprintf("unknown command %q (pauses, state, pause, resume; -h for help)", c.command)}
	case len(c.args) != n:
		return c, usageError{fmt.Sprintf("%s takes %d arguments, got %d: %s", c.command, n, len(c.args), commandUsage[c.command])}
	}
	return c, nil
}

var commandUsage = map[string]string{
	"pauses": "quotagate pauses",
	"state":  "quotagate state PROVIDER ACCOUNT",
	"pause":  "quotagate pause PROVIDER ACCOUNT DURATION",
	"resume": "quotagate resume PROVIDER ACCOUNT",
}

// run is the command: it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	c, err := parse(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "quotagate: %v\n", err)
		return exitUsage
	}
	code, err := execute(c, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "quotagate: %v\n", err)
	}
	return code
}

// silent drops go-redis's own log lines (dial retries): failures reach the
// user once, as this command's error.
type silent struct{}

func (silent) Printf(context.Context, string, ...any) {}

// connect opens the client the URL names and checks that Redis answers.
func connect(ctx context.Context, c config) (redis.UniversalClient, string, error) {
	var rdb redis.UniversalClient
	var where string
	if c.cluster {
		o, err := redis.ParseClusterURL(c.redisURL)
		if err != nil {
			return nil, "", usageError{"-redis: " + redactURLError(err)}
		}
		rdb, where = redis.NewClusterClient(o), "the Redis Cluster at "+strings.Join(o.Addrs, ",")
	} else {
		o, err := redis.ParseURL(c.redisURL)
		if err != nil {
			return nil, "", usageError{"-redis: " + redactURLError(err)}
		}
		rdb, where = redis.NewClient(o), "Redis at "+o.Addr
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, "", fmt.Errorf("cannot reach %s: %v", where, err)
	}
	return rdb, where, nil
}

// redactURLError returns a URL parsing error without the URL, which may
// hold a password.
func redactURLError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return "invalid URL: " + ue.Err.Error()
	}
	return err.Error()
}

// execute runs the command c and returns its exit status.
func execute(c config, stdout io.Writer) (int, error) {
	var s quotagate.Scope
	var d time.Duration
	if c.command != "pauses" {
		s = quotagate.Scope{Provider: c.args[0], Account: c.args[1]}
		if err := s.Validate(); err != nil {
			return exitUsage, err
		}
	}
	if c.command == "pause" {
		var err error
		if d, err = time.ParseDuration(c.args[2]); err != nil || d < quotagate.MinPause || d > maxManualPause {
			return exitUsage, usageError{fmt.Sprintf("DURATION %q: want %v to %v (e.g. 90s, 10m); workers treat a deadline beyond their MaxPause as malformed",
				c.args[2], quotagate.MinPause, maxManualPause)}
		}
	}

	redis.SetLogger(silent{})
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	rdb, where, err := connect(ctx, c)
	if err != nil {
		if errors.As(err, new(usageError)) {
			return exitUsage, err
		}
		return exitRedis, err
	}
	defer rdb.Close()
	g := quotagate.New(rdb, quotagate.Config{Prefix: c.prefix, StoreTimeout: c.timeout, MaxPause: maxManualPause})
	defer g.Close()

	out := printer{w: stdout, json: c.json}
	switch c.command {
	case "pauses":
		ps, err := g.Pauses(ctx)
		if err != nil && !errors.Is(err, quotagate.ErrTruncated) {
			return exitRedis, fmt.Errorf("%s: %w", where, err)
		}
		if perr := out.pauses(ps); perr != nil {
			return exitRedis, perr
		}
		if err != nil { // truncated: what was printed is not everything
			return exitRedis, err
		}
	case "state":
		p, err := g.State(ctx, s)
		if err != nil {
			return exitRedis, fmt.Errorf("%s: %w", where, err)
		}
		return exitOK, out.state(p)
	case "pause":
		p, err := g.Pause(ctx, s, d)
		if err != nil {
			return exitRedis, fmt.Errorf("%s: %w", where, err)
		}
		return exitOK, out.state(p)
	case "resume":
		if err := g.Resume(ctx, s); err != nil {
			return exitRedis, fmt.Errorf("%s: %w", where, err)
		}
		p, err := g.State(ctx, s)
		if err != nil {
			return exitRedis, fmt.Errorf("%s: %w", where, err)
		}
		return exitOK, out.state(p)
	}
	return exitOK, nil
}

// printer writes pauses as a table or as JSON.
type printer struct {
	w    io.Writer
	json bool
}

func (o printer) pauses(ps []quotagate.Pause) error {
	if o.json {
		if ps == nil {
			ps = []quotagate.Pause{} // [], not null
		}
		return o.encode(ps)
	}
	if len(ps) == 0 {
		_, err := fmt.Fprintln(o.w, "no pause in force")
		return err
	}
	tw := tabwriter.NewWriter(o.w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "PROVIDER\tACCOUNT\tUNTIL (UTC)\tREMAINING\tLIMIT BACKLOG")
	for _, p := range ps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", field(p.Scope.Provider), field(p.Scope.Account),
			p.Until.UTC().Format(quotagate.RFC3339Milli), p.Remaining.Round(time.Millisecond), backlog(p.LimitBacklog))
	}
	return tw.Flush()
}

func (o printer) state(p quotagate.Pause) error {
	if o.json {
		return o.encode(p)
	}
	var err error
	if p.Until.IsZero() {
		_, err = fmt.Fprintf(o.w, "%s is open", p.Scope)
	} else {
		_, err = fmt.Fprintf(o.w, "%s is paused until %s (%v left)", p.Scope,
			p.Until.UTC().Format(quotagate.RFC3339Milli), p.Remaining.Round(time.Millisecond))
	}
	if err == nil && p.LimitBacklog > 0 {
		_, err = fmt.Fprintf(o.w, "; limit backlog %v", backlog(p.LimitBacklog))
	}
	if err == nil {
		_, err = fmt.Fprintln(o.w)
	}
	return err
}

func (o printer) encode(v any) error {
	e := json.NewEncoder(o.w)
	e.SetIndent("", "  ")
	return e.Encode(v)
}

// field quotes a table cell that would be ambiguous bare: empty, or with
// spaces or quotes in it.
func field(s string) string {
	if s == "" || strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || r == '"' }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

func backlog(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}
