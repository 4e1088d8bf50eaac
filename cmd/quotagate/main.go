// Command quotagate reads and steers the pauses a quotagate Gate keeps in
// Redis: which scopes are paused, until when, and how far their limit is
// spent; it pauses a scope by hand (during a provider's incident) or lifts a
// pause.
//
//	go install github.com/quotagate/quotagate/cmd/quotagate@latest
//	quotagate [flags] COMMAND [ARGS] [flags]
//
// Commands:
//
//	pauses                           every pause in force
//	state PROVIDER ACCOUNT           one scope's pause and limit backlog
//	pause PROVIDER ACCOUNT DURATION  pause a scope (monotonic: never shortens one)
//	resume PROVIDER ACCOUNT          lift a scope's pause now
//
// Flags, before or after the command: -redis ADDRESS (host:port, or a
// redis:// or rediss:// URL; default $QUOTAGATE_REDIS_URL, else
// redis://127.0.0.1:6379/0), -cluster (the address names a node of a Redis
// Cluster; more seed nodes as host:port,host:port or with ?addr=host:port),
// -prefix (the Gate's Config.Prefix, default quotagate), -json, -timeout
// (default 10s). After "--" every word is an argument (for an account that
// starts with '-').
//
// ACCOUNT is the Scope's Account as the application sets it (often a
// credential's Fingerprint, "fp:…"); an empty argument is the empty account.
// state and resume answer "no such scope" for a scope of which Redis holds
// no key under the prefix (a typo in a name or in -prefix).
//
// Exit status: 0 done, 1 Redis failed or could not be reached, or no such
// scope, 2 bad usage (a flag, an argument or the address).
//
// The command uses the library's Gate for everything but that existence
// check, so its key names and scripts are the ones the workers use: it
// lists with SCAN on every master (never KEYS) and reads each pause on Redis
// TIME.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// Exit statuses.
const (
	exitOK    = 0
	exitRedis = 1 // Redis unreachable, failing, an incomplete listing, or no such scope
	exitUsage = 2 // a bad flag, argument or address
)

const usage = `usage: quotagate [flags] COMMAND [ARGS] [flags]

Reads and steers the pauses a quotagate Gate keeps in Redis.

Commands:
  pauses                           every pause in force: provider, account,
                                   deadline, remaining time, limit backlog
  state PROVIDER ACCOUNT           one scope's pause and limit backlog
  pause PROVIDER ACCOUNT DURATION  pause a scope for DURATION (e.g. 90s, 10m; 1s to 12h);
                                   monotonic: a later deadline in force stays
  resume PROVIDER ACCOUNT          lift a scope's pause now

ACCOUNT is the scope's account as the application sets it (often a
fingerprint, fp:...); '' is the empty account. state and resume answer
"no such scope" when Redis holds nothing for the scope under -prefix.

Flags go before or after the command; after -- every word is an argument.

Flags:
`

const usageTail = `
Environment:
  ` + envRedisURL + `  the Redis address when -redis is not given (keeps a
                       password off the command line)

Exit status: 0 done, 1 Redis failed or could not be reached, or no such
scope, 2 bad usage.
`

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

// libMessage is the message of an error of the library without the
// library's own "quotagate: ", in front or where it wraps one of its own
// errors ("quotagate: pause acme: quotagate: store timeout"): the command
// names itself once.
func libMessage(err error) string {
	return strings.ReplaceAll(strings.TrimPrefix(err.Error(), "quotagate: "), ": quotagate: ", ": ")
}

// libError wraps an error of the library met at where (Redis at host:port)
// for printing after the command's own name.
type libError struct {
	where string
	err   error
}

func (e libError) Error() string { return e.where + ": " + libMessage(e.err) }
func (e libError) Unwrap() error { return e.err }

// execute runs the command c and returns its exit status.
func execute(c config, stdout io.Writer) (int, error) {
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
	failed := func(err error) (int, error) { return exitRedis, libError{where, err} }

	out := printer{w: stdout, json: c.json}
	switch c.command {
	case "pauses":
		ps, err := g.Pauses(ctx)
		if err != nil && !errors.Is(err, quotagate.ErrTruncated) {
			return failed(err)
		}
		if perr := out.pauses(ps); perr != nil {
			return exitRedis, perr
		}
		if err != nil { // truncated: what was printed is not everything
			return failed(err)
		}
		return exitOK, nil
	case "pause":
		p, err := g.Pause(ctx, c.scope(), c.pause)
		if err != nil {
			return failed(err)
		}
		return exitOK, out.state(p)
	}

	// state and resume: of a scope that exists.
	s := c.scope()
	ok, err := hasRecord(ctx, rdb, c.prefix, s)
	if err != nil {
		return failed(err)
	}
	if !ok {
		return exitRedis, errNoSuchScope{provider: s.Provider, prefix: c.prefix}
	}
	if c.command == "resume" {
		if err := g.Resume(ctx, s); err != nil {
			return failed(err)
		}
	}
	p, err := g.State(ctx, s)
	if err != nil {
		return failed(err)
	}
	return exitOK, out.state(p)
}
