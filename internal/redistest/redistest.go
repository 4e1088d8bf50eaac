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
// If redis-server is not in PATH, Start skips the test, unless the
// environment variable QUOTAGATE_REQUIRE_REDIS is set to a non-empty value
// other than "0" (as CI does), in which case the test fails.
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

	version string
	cmd     *exec.Cmd
	out     *syncBuffer   // the server's stdout+stderr
	done    chan struct{} // closed when the process has exited
	tmpDir  string        // removed on stop if non-empty (created by us)
	stopped sync.Once
}

var (
	mu          sync.Mutex
	mainActive  bool    // Main is running: share one server per process
	shared      *Server // the shared server, started lazily
	sharedErr   error   // why starting the shared server failed, if it did
	prefixCount atomic.Uint64
)

// Main runs the tests of a package with one redis-server shared by all of
// them, started lazily by the first [Start] and stopped after m.Run. Call it
// from TestMain:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
//
// It does not return: it exits with m.Run's code.
func Main(m *testing.M) {
	mu.Lock()
	mainActive = true
	mu.Unlock()

	code := m.Run()

	mu.Lock()
	s := shared
	shared, sharedErr, mainActive = nil, nil, false
	mu.Unlock()
	if s != nil {
		s.stop()
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
	path, err := exec.LookPath(Binary)
	if err != nil {
		if RequireRedis(os.Getenv(RequireEnv)) {
			tb.Fatalf("redistest: %s not found in PATH and %s is set; install it, e.g. apt-get install -y redis-server", Binary, RequireEnv)
		}
		tb.Skipf("redistest: %s not found in PATH; skipping test that needs a real Redis (set %s=1 to make this a failure)", Binary, RequireEnv)
	}

	mu.Lock()
	if mainActive {
		defer mu.Unlock()
		if shared == nil && sharedErr == nil {
			dir, err := os.MkdirTemp("", "redistest-")
			if err != nil {
				sharedErr = err
			} else if shared, sharedErr = startServer(path, dir); sharedErr != nil {
				os.RemoveAll(dir)
			} else {
				shared.tmpDir = dir
			}
		}
		if sharedErr != nil {
			tb.Fatalf("redistest: starting shared %s: %v", Binary, sharedErr)
		}
		if shared.exited() {
			tb.Fatalf("redistest: shared %s at %s has exited; its output:\n%s", Binary, shared.Addr, shared.out)
		}
		return shared
	}
	mu.Unlock()

	// No Main: a private server for this test. TempDir is created before
	// registering stop, so cleanups stop the server before removing it.
	s, err := startServer(path, tb.TempDir())
	if err != nil {
		tb.Fatalf("redistest: starting %s: %v", Binary, err)
	}
	tb.Cleanup(s.stop)
	return s
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
func (s *Server) Version() string { return s.version }

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
// retrying on a fresh port if the chosen one was taken meanwhile.
func startServer(path, dir string) (*Server, error) {
	var err error
	for range startTries {
		var port int
		if port, err = freePort(); err != nil {
			return nil, err
		}
		var s *Server
		var retry bool
		if s, retry, err = tryStart(path, dir, port); err == nil {
			return s, nil
		}
		if !retry {
			break
		}
	}
	return nil, err
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("picking a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tryStart starts one server on port and waits until it answers. retry
// reports whether the failure looks like a lost race for the port.
func tryStart(path, dir string, port int) (s *Server, retry bool, err error) {
	cmd := exec.Command(path,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--daemonize", "no",
		"--protected-mode", "yes",
		"--loglevel", "warning",
	)
	out := new(syncBuffer)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = stopGrace
	if err := cmd.Start(); err != nil {
		return nil, false, err
	}
	s = &Server{
		Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		cmd:  cmd,
		out:  out,
		done: make(chan struct{}),
	}
	go func() { cmd.Wait(); close(s.done) }()

	err = s.waitReady()
	if err == nil {
		return s, false, nil
	}
	s.stop()
	retry = errors.Is(err, errNotOurs) || strings.Contains(out.String(), "Address already in use")
	return nil, retry, fmt.Errorf("%w; server output:\n%s", err, out)
}

var errNotOurs = errors.New("another process answers on the port")

// waitReady waits until s accepts TCP connections (bounded by readyTimeout
// and by the process exiting), PINGs it, and checks that the answering server
// is our child process, recording its version. Probing with a plain dial
// first keeps go-redis from logging dial failures while the server boots.
func (s *Server) waitReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for {
		if s.exited() {
			return fmt.Errorf("%s on %s exited during start-up: %v", Binary, s.Addr, s.cmd.ProcessState)
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
		case <-s.done:
		case <-time.After(20 * time.Millisecond):
		}
	}

	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, PoolSize: 1})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("PING %s: %v", s.Addr, err)
	}
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return fmt.Errorf("INFO server on %s: %v", s.Addr, err)
	}
	fields := parseInfo(info)
	if pid := fields["process_id"]; pid != strconv.Itoa(s.cmd.Process.Pid) {
		return fmt.Errorf("%w %s (process_id %q, ours is %d)", errNotOurs, s.Addr, pid, s.cmd.Process.Pid)
	}
	s.version = fields["redis_version"]
	return nil
}

// parseInfo parses the "key:value" lines of an INFO reply.
func parseInfo(info string) map[string]string {
	m := make(map[string]string)
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			m[k] = v
		}
	}
	return m
}

// exited reports whether the server process has ended.
func (s *Server) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// stop terminates the server (SIGTERM, then SIGKILL after stopGrace), waits
// for it and removes a temporary directory it owns. It is idempotent.
func (s *Server) stop() {
	s.stopped.Do(func() {
		if !s.exited() {
			s.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.done:
			case <-time.After(stopGrace):
				s.cmd.Process.Kill()
				<-s.done
			}
		}
		if s.tmpDir != "" {
			os.RemoveAll(s.tmpDir)
		}
	})
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of the child's
// output and reads for error messages.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
