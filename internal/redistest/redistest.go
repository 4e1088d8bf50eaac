// Package redistest starts a real redis-server for tests.
//
// It exists because quotagate's correctness depends on Redis semantics that a
// fake cannot be trusted to reproduce: atomicity of scripts and
// transactions, the server clock (TIME) and key expiry. Tests that rely on
// them run against a genuine redis-server binary that this package starts on
// a free loopback port, with persistence disabled and a throw-away working
// directory.
//
// Safety rules: the package only ever talks to a server it started itself
// (after start-up it checks that the answering server's process_id is its own
// child), and it never flushes anything. Tests isolate their data by key
// prefix (see [Server.Prefix]), so many tests can share one server.
//
// Usage:
//
//	func TestMain(m *testing.M) { redistest.Main(m) } // optional: one server per test binary
//
//	func TestSomething(t *testing.T) {
//		srv := redistest.Start(t)
//		rdb := srv.Client(t)
//		key := srv.Prefix(t) + ":bucket"
//		...
//	}
//
// [StartCluster] starts a 3-master Redis Cluster the same way (see
// cluster.go), and [StartPrivate] a server of the test's own that it may
// kill, restart, suspend and resume to inject faults (see fault.go).
//
// If redis-server (or, for a cluster, redis-cli) is not in PATH, the test is
// skipped, unless the environment variable QUOTAGATE_REQUIRE_REDIS is set to
// a non-empty value other than "0" (as CI does), in which case it fails.
package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// Binary is the executable looked up in PATH.
	Binary = "redis-server"
	// RequireEnv names the environment variable that turns a missing
	// redis-server from a skip into a failure.
	RequireEnv = "QUOTAGATE_REQUIRE_REDIS"

	readyTimeout = 10 * time.Second // how long a fresh server may take to answer PING
	stopGrace    = 5 * time.Second  // SIGTERM → SIGKILL delay
	startTries   = 5                // attempts, in case a picked port gets taken
)

// Server is a redis-server this test process started on a free loopback
// port. A per-test server is stopped by tb.Cleanup; the shared server used
// under [Main] is stopped when the test binary exits.
type Server struct {
	Addr string // host:port, e.g. "127.0.0.1:41234"

	path    string   // the binary
	args    []string // its command line, reused by Restart
	env     []string // added to the environment of its process (skew.go); nil: none
	private bool     // the test's own: faults may be injected (fault.go)
	tmpDir  string   // removed on stop if non-empty (created by us)
	stopped sync.Once

	mu      sync.Mutex
	proc    *process // the running process, or the last one
	version string
}

// process is one run of the server binary; Restart starts a new one.
type process struct {
	cmd  *exec.Cmd
	out  *Buffer       // its stdout+stderr
	done chan struct{} // closed when it has exited
}

var (
	mu          sync.Mutex
	mainActive  bool     // Main is running: share one server and cluster per process
	shared      *Server  // the shared server, started lazily
	sharedErr   error    // why starting the shared server failed, if it did
	cluster     *Cluster // the shared cluster, started lazily
	clusterErr  error    // why starting the shared cluster failed, if it did
	prefixCount atomic.Uint64
)

// Main runs the tests of a package with one redis-server and one cluster
// shared by all of them, each started lazily by the first [Start] or
// [StartCluster] and stopped after m.Run. Then, if the tests passed, it runs
// the checks (e.g. [NoLeaks]) and fails the binary if one returns an error.
// Call it from TestMain:
//
//	func TestMain(m *testing.M) { redistest.Main(m, redistest.NoLeaks()) }
//
// It does not return: it exits with m.Run's code, or 1 if a check failed.
func Main(m *testing.M, checks ...func() error) {
	mu.Lock()
	mainActive = true
	mu.Unlock()

	code := m.Run()

	mu.Lock()
	s, c := shared, cluster
	shared, sharedErr, cluster, clusterErr, mainActive = nil, nil, nil, nil, false
	mu.Unlock()
	if s != nil {
		s.stop()
	}
	if c != nil {
		c.stop()
	}
	if code == 0 {
		for _, check := range checks {
			if err := check(); err != nil {
				fmt.Fprintf(os.Stderr, "redistest: after the tests: %v\n", err)
				code = 1
			}
		}
	}
	os.Exit(code)
}

// Start returns a running redis-server for the test. Under [Main] all tests
// of the binary share one server; otherwise the server is private to the
// test and stopped by tb.Cleanup. If redis-server is not installed, the test
// is skipped, or fails if QUOTAGATE_REQUIRE_REDIS is set (see
// [RequireRedis]).
func Start(tb testing.TB) *Server {
	tb.Helper()
	path := lookPath(tb, Binary)

	mu.Lock()
	if mainActive {
		defer mu.Unlock()
		if shared == nil && sharedErr == nil {
			dir, err := os.MkdirTemp("", "redistest-")
			if err != nil {
				sharedErr = err
			} else if shared, sharedErr = startServer(path, dir, false); sharedErr != nil {
				os.RemoveAll(dir)
			} else {
				shared.tmpDir = dir
			}
		}
		if sharedErr != nil {
			tb.Fatalf("redistest: starting shared %s: %v", Binary, sharedErr)
		}
		if shared.exited() {
			tb.Fatalf("redistest: shared %s at %s has exited; its output:\n%s", Binary, shared.Addr, shared.output())
		}
		return shared
	}
	mu.Unlock()
	return startOwn(tb, path)
}

// startOwn starts a server private to the test, stopped by its cleanup.
// TempDir is created before registering stop, so cleanups stop the server
// before removing its directory.
func startOwn(tb testing.TB, path string) *Server {
	tb.Helper()
	s, err := startServer(path, tb.TempDir(), false)
	if err != nil {
		tb.Fatalf("redistest: starting %s: %v", Binary, err)
	}
	tb.Cleanup(s.stop)
	return s
}

// lookPath finds a binary the tests need, or skips the test (fails it
// under QUOTAGATE_REQUIRE_REDIS).
func lookPath(tb testing.TB, name string) string {
	tb.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if RequireRedis(os.Getenv(RequireEnv)) {
			tb.Fatalf("redistest: %s not found in PATH and %s is set; install it, e.g. apt-get install -y redis-server redis-tools", name, RequireEnv)
		}
		tb.Skipf("redistest: %s not found in PATH; skipping test that needs a real Redis (set %s=1 to make this a failure)", name, RequireEnv)
	}
	return path
}

// RequireRedis reports whether a missing redis-server must fail the test
// rather than skip it, given the value of QUOTAGATE_REQUIRE_REDIS: any
// non-empty value other than "0" requires it.
func RequireRedis(env string) bool {
	return env != "" && env != "0"
}

// Client returns a new go-redis client connected to s, closed by tb.Cleanup.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	tb.Cleanup(func() { c.Close() })
	return c
}

// Prefix returns a key prefix unique to this call within the test process,
// of the form "qgtest:<n>:<sanitized test name>" (no trailing colon). Tests
// put all their keys under their prefix instead of flushing the server.
func (s *Server) Prefix(tb testing.TB) string {
	return fmt.Sprintf("qgtest:%d:%s", prefixCount.Add(1), sanitize(tb.Name()))
}

// Version returns the server's redis_version (from INFO server).
func (s *Server) Version() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

// sanitize maps a test name to something harmless inside a Redis key:
// letters, digits, '_', '-', '.' and '/' are kept, anything else (spaces,
// ':', glob characters, '{' '}' hash-tag braces, ...) becomes '_'.
func sanitize(name string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9',
			r == '_', r == '-', r == '.', r == '/':
			return r
		}
		return '_'
	}, name)
}

// startServer starts redis-server from path with its working directory dir,
// retrying on a fresh port if the chosen one was taken meanwhile. A cluster
// node also needs its bus port (port+10000) free, and runs in cluster mode.
func startServer(path, dir string, clusterNode bool) (*Server, error) {
	return startServerWith(path, clusterNode, func(port int) ([]string, error) {
		return serverArgs(port, dir, clusterNode), nil
	})
}

// startServerWith starts redis-server from path with the command line that
// args returns for a free port (with bus, one whose cluster bus port is free
// too), retrying on a fresh port if the chosen one was taken meanwhile.
func startServerWith(path string, bus bool, args func(port int) ([]string, error)) (*Server, error) {
	return startServerEnv(path, bus, nil, args)
}

// startServerEnv is startServerWith with env added to the server's
// environment.
func startServerEnv(path string, bus bool, env []string, args func(port int) ([]string, error)) (*Server, error) {
	var err error
	for range startTries {
		var port int
		if port, err = freePort(bus); err != nil {
			return nil, err
		}
		var a []string
		if a, err = args(port); err != nil {
			return nil, err
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), path: path, args: a, env: env}
		var retry bool
		if retry, err = s.start(); err == nil {
			return s, nil
		}
		if !retry {
			break
		}
	}
	return nil, err
}

// serverArgs is the command line of a server: loopback only, no
// persistence, and for a cluster node cluster mode with a node timeout long
// enough that a loaded test machine never gets a node declared failed (a
// failed master would stop the whole cluster), and without requiring full
// slot coverage for the same reason.
func serverArgs(port int, dir string, clusterNode bool) []string {
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--daemonize", "no",
		"--protected-mode", "yes",
		"--loglevel", "warning",
	}
	if clusterNode {
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "60000",
			"--cluster-require-full-coverage", "no",
		)
	}
	return args
}

// clusterBusOffset is how far above its port a cluster node listens for the
// cluster bus (fixed by Redis unless cluster-port is set, which Redis 6
// lacks).
const clusterBusOffset = 10000

// freePort returns a loopback TCP port that was free a moment ago; with bus,
// one whose cluster bus port was free too.
func freePort(bus bool) (int, error) {
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("picking a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !bus {
			l.Close()
			return port, nil
		}
		if port+clusterBusOffset <= 65535 {
			if b, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+clusterBusOffset))); err == nil {
				b.Close()
				l.Close()
				return port, nil
			}
		}
		l.Close()
	}
	return 0, errors.New("picking a free port: found none whose cluster bus port is free")
}

// start starts the server process on s.Addr with s.args and waits until it
// answers. retry reports whether a failure looks like a lost race for the
// port.
func (s *Server) start() (retry bool, err error) {
	cmd := exec.Command(s.path, s.args...)
	if s.env != nil {
		cmd.Env = append(os.Environ(), s.env...)
	}
	out := new(Buffer)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = stopGrace
	if err := cmd.Start(); err != nil {
		return false, err
	}
	p := &process{cmd: cmd, out: out, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()

	err = s.waitReady(p)
	if err == nil {
		return false, nil
	}
	p.kill()
	retry = errors.Is(err, errNotOurs) || errors.Is(err, errDropped) || strings.Contains(out.String(), "Address already in use")
	return retry, fmt.Errorf("%w; server output:\n%s", err, out)
}

var errNotOurs = errors.New("another process answers on the port")

// errDropped is a connection accepted on the port and dropped before it
// answered: another process's listener closing, or the server exiting as
// it found its cluster bus port taken (before its log says so). Another
// port is tried, as for errNotOurs.
var errDropped = errors.New("the port accepted a connection and dropped it")

// waitReady waits until s accepts TCP connections (bounded by readyTimeout
// and by the process p exiting), PINGs it, and checks that the answering
// server is p, recording its version. Probing with a plain dial first keeps
// go-redis from logging dial failures while the server boots.
func (s *Server) waitReady(p *process) error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for {
		if p.exited() {
			return fmt.Errorf("%s on %s exited during start-up: %v", Binary, s.Addr, p.cmd.ProcessState)
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", s.Addr)
		if err == nil {
			conn.Close()
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s on %s not ready after %v: %v", Binary, s.Addr, readyTimeout, err)
		case <-p.done:
		case <-time.After(20 * time.Millisecond):
		}
	}

	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, PoolSize: 1})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("%w: PING %s: %v", errDropped, s.Addr, err)
	}
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return fmt.Errorf("%w: INFO server on %s: %v", errDropped, s.Addr, err)
	}
	fields := ParseInfo(info)
	if pid := fields["process_id"]; pid != strconv.Itoa(p.cmd.Process.Pid) {
		return fmt.Errorf("%w %s (process_id %q, ours is %d)", errNotOurs, s.Addr, pid, p.cmd.Process.Pid)
	}
	s.mu.Lock()
	s.version = fields["redis_version"]
	s.mu.Unlock()
	return nil
}

// ParseInfo parses the "key:value" lines of an INFO reply (a section
// header, "# Name", is left out).
func ParseInfo(info string) map[string]string {
	m := make(map[string]string)
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			m[k] = v
		}
	}
	return m
}

// current returns the server's running (or last) process.
func (s *Server) current() *process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc
}

// exited reports whether the server process has ended.
func (s *Server) exited() bool { return s.current().exited() }

// output returns what the server process wrote.
func (s *Server) output() string { return s.current().out.String() }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill ends the process with SIGKILL and waits for it.
func (p *process) kill() {
	p.cmd.Process.Kill()
	<-p.done
}

// stop terminates the server (SIGTERM, then SIGKILL after stopGrace), waits
// for it and removes a temporary directory it owns. A suspended server is
// continued so that it can handle SIGTERM. It is idempotent.
func (s *Server) stop() {
	s.stopped.Do(func() {
		if p := s.current(); !p.exited() {
			p.cmd.Process.Signal(syscall.SIGTERM)
			p.cmd.Process.Signal(syscall.SIGCONT)
			select {
			case <-p.done:
			case <-time.After(stopGrace):
				p.kill()
			}
		}
		if s.tmpDir != "" {
			os.RemoveAll(s.tmpDir)
		}
	})
}

// Buffer is a bytes.Buffer safe for concurrent writes and reads: a child
// server's output read for error messages, a logger's lines read by a
// test. Its zero value is empty and ready.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
