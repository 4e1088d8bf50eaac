package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/quotagate/quotagate"
)

// envRedisURL names the environment variable that gives the Redis address
// when -redis is not set: the way to keep a password off the command line
// (and out of the process list).
const envRedisURL = "QUOTAGATE_REDIS_URL"

// defaultRedisURL is the Redis address without -redis or envRedisURL.
const defaultRedisURL = "redis://127.0.0.1:6379/0"

// config is the parsed command line.
type config struct {
	redisURL  string
	redisFrom string // where redisURL came from: "-redis", envRedisURL or "" (the default)
	cluster   bool
	prefix    string
	json      bool
	timeout   time.Duration
	command   string
	args      []string
	pause     time.Duration // the DURATION of pause
}

// usageError is a bad flag, argument or URL: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// arity is the number of arguments of each command.
var arity = map[string]int{"pauses": 0, "state": 2, "pause": 3, "resume": 2}

var commandUsage = map[string]string{
	"pauses": "quotagate pauses",
	"state":  "quotagate state PROVIDER ACCOUNT",
	"pause":  "quotagate pause PROVIDER ACCOUNT DURATION",
	"resume": "quotagate resume PROVIDER ACCOUNT",
}

// parse reads the command line. Flags may come before or after the
// command and among its arguments; after "--" everything is an argument.
// The environment is read only for envRedisURL, when -redis is not given.
// On -h (or the command help) it prints the usage and returns flag.ErrHelp.
func parse(args []string, stdout io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("quotagate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	// No default in the flag itself: -h must not print a password that the
	// environment holds.
	fs.StringVar(&c.redisURL, "redis", "", "Redis `address`: host:port, redis://[user:password@]host:port/db, or rediss:// for TLS\n(default $"+envRedisURL+", else "+defaultRedisURL+")")
	fs.BoolVar(&c.cluster, "cluster", false, "the address names a node of a Redis Cluster (more seeds: host:port,host:port\nor ?addr=host:port&addr=...)")
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
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			help()
			return c, err
		}
		return c, usageError{err.Error()}
	}
	if c.timeout <= 0 {
		return c, usageError{"-timeout must be positive"}
	}
	switch {
	case c.redisURL != "":
		c.redisFrom = "-redis"
	case os.Getenv(envRedisURL) != "":
		c.redisURL, c.redisFrom = os.Getenv(envRedisURL), envRedisURL
	default:
		c.redisURL = defaultRedisURL
	}
	if len(pos) == 0 {
		return c, usageError{"missing COMMAND (pauses, state, pause, resume; -h for help)"}
	}
	c.command, c.args = pos[0], pos[1:]
	n, ok := arity[c.command]
	switch {
	case c.command == "help":
		help()
		return c, flag.ErrHelp
	case !ok:
		return c, usageError{fmt.Sprintf("unknown command %q (pauses, state, pause, resume; -h for help)", c.command)}
	case len(c.args) != n:
		// The arguments are not quoted: one of them may be an account.
		return c, usageError{fmt.Sprintf("%s takes %d arguments, got %d: %s", c.command, n, len(c.args), commandUsage[c.command])}
	}
	if c.command != "pauses" {
		if err := c.scope().Validate(); err != nil {
			return c, usageError{libMessage(err)}
		}
	}
	if c.command == "pause" {
		if c.pause, err = parsePause(c.args[2]); err != nil {
			return c, err
		}
	}
	return c, nil
}

// scope is the PROVIDER ACCOUNT of the command's arguments.
func (c config) scope() quotagate.Scope {
	return quotagate.Scope{Provider: c.args[0], Account: c.args[1]}
}

// parseInterspersed parses args with fs, allowing flags among the
// positional arguments, and returns the positional ones in order.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if stoppedAtTerminator(fs, args[:len(args)-len(rest)]) {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// stoppedAtTerminator reports whether fs.Parse, having consumed the
// arguments consumed, stopped at a "--" rather than at a positional
// argument ("--" may also be the value of a flag, as in -prefix --).
func stoppedAtTerminator(fs *flag.FlagSet, consumed []string) bool {
	value := false // the next argument is the value of a flag
	for _, a := range consumed {
		if value {
			value = false
			continue
		}
		if a == "--" {
			return true
		}
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if f := fs.Lookup(name); f != nil {
			b, isBool := f.Value.(interface{ IsBoolFlag() bool })
			value = !isBool || !b.IsBoolFlag()
		}
	}
	return false
}

// maxManualPause is the longest pause the command records: the workers'
// default Config.MaxPause. A worker treats a deadline farther ahead than its
// own MaxPause as malformed, that is open, so a longer manual pause would
// lift itself.
const maxManualPause = 12 * time.Hour

// bareNumber matches a duration written without its unit.
var bareNumber = regexp.MustCompile(`^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)$`)

// parsePause reads the DURATION of pause: a Go duration from MinPause to
// maxManualPause.
func parsePause(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	var msg string
	switch {
	case err != nil && bareNumber.MatchString(v):
		msg = fmt.Sprintf("missing unit, e.g. %ss", v)
	case err != nil:
		msg = "not a duration; e.g. 90s, 10m or 1h30m"
	case d < quotagate.MinPause:
		msg = fmt.Sprintf("shorter than %v, the shortest pause", quotagate.MinPause)
	case d > maxManualPause:
		msg = fmt.Sprintf("longer than %v: workers read a deadline beyond their MaxPause (default %v) as malformed, that is open", maxManualPause, maxManualPause)
	default:
		return d, nil
	}
	return 0, usageError{"duration " + field(v) + ": " + msg}
}
