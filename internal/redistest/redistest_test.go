package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestMain(m *testing.M) { Main(m, NoLeaks()) }

func TestPing(t *testing.T) {
	srv := Start(t)
	rdb := srv.Client(t)
	got, err := rdb.Ping(context.Background()).Result()
	if err != nil || got != "PONG" {
		t.Fatalf("PING = %q, %v; want PONG", got, err)
	}
	if !strings.HasPrefix(srv.Addr, "127.0.0.1:") {
		t.Errorf("Addr = %q, want a 127.0.0.1 address", srv.Addr)
	}
	if srv.Version() == "" {
		t.Error("Version() is empty")
	}
	t.Logf("redis-server %s at %s", srv.Version(), srv.Addr)
}

func TestTime(t *testing.T) {
	rdb := Start(t).Client(t)
	got, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	if d := time.Since(got); d < -time.Minute || d > time.Minute {
		t.Errorf("TIME = %v, more than a minute from local time", got)
	}
}

func TestSharedUnderMain(t *testing.T) {
	if a, b := Start(t), Start(t); a != b {
		t.Errorf("under Main, Start returned two servers: %s and %s", a.Addr, b.Addr)
	}
}

// TestPerTestServer exercises the fallback for packages that do not call
// Main: a private server, stopped by the test's cleanup.
func TestPerTestServer(t *testing.T) {
	mu.Lock()
	saved := mainActive
	mainActive = false
	mu.Unlock()
	defer func() { mu.Lock(); mainActive = saved; mu.Unlock() }()

	var srv *Server
	t.Run("sub", func(t *testing.T) {
		srv = Start(t)
		if err := srv.Client(t).Ping(context.Background()).Err(); err != nil {
			t.Fatalf("PING: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if srv == shared {
			t.Fatal("got the shared server")
		}
	})
	if srv == nil {
		return // the subtest skipped or failed, and said why
	}
	if !srv.exited() {
		t.Errorf("per-test server at %s still running after its test ended", srv.Addr)
	}
}

func TestPrefixUnique(t *testing.T) {
	srv := Start(t)
	var (
		mu   sync.Mutex
		seen = map[string]string{}
	)
	record := func(t *testing.T) {
		p := srv.Prefix(t)
		mu.Lock()
		defer mu.Unlock()
		if prev, dup := seen[p]; dup {
			t.Errorf("prefix %q given to both %s and %s", p, prev, t.Name())
		}
		seen[p] = t.Name()
	}
	for i := range 20 {
		t.Run(fmt.Sprintf("case %02d {tag}*?", i), func(t *testing.T) {
			t.Parallel()
			record(t)
			record(t) // twice in one test: still distinct
		})
	}
	t.Cleanup(func() {
		if len(seen) != 40 {
			t.Errorf("got %d prefixes, want 40", len(seen))
		}
		for p := range seen {
			if !strings.HasPrefix(p, "qgtest:") || strings.ContainsAny(p, " {}*?") ||
				!strings.Contains(p, ":TestPrefixUnique/case_") {
				t.Errorf("badly formed prefix %q", p)
			}
		}
	})
}

func TestPrefixIsolation(t *testing.T) {
	srv := Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	mine, other := srv.Prefix(t), srv.Prefix(t)

	for i := range 3 {
		if err := rdb.Set(ctx, fmt.Sprintf("%s:k%d", mine, i), i, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.Set(ctx, other+":k0", "other", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := rdb.Get(ctx, mine+":k1").Result(); err != nil || got != "1" {
		t.Errorf("GET %s:k1 = %q, %v; want 1", mine, got, err)
	}
	keys, err := rdb.Keys(ctx, mine+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 3 {
		t.Errorf("KEYS %s:* = %v, want 3 keys", mine, keys)
	}
}

func TestRequireRedis(t *testing.T) {
	for env, want := range map[string]bool{
		"": false, "0": false, "1": true, "yes": true, "true": true, "00": true,
	} {
		if got := RequireRedis(env); got != want {
			t.Errorf("RequireRedis(%q) = %v, want %v", env, got, want)
		}
	}
}

// TestMissingBinary runs every starter with an empty PATH, and those of a
// cluster with redis-server but no redis-cli, through a fake TB that
// records whether it skipped or failed.
func TestMissingBinary(t *testing.T) {
	starters := map[string]func(testing.TB){
		"Start":                  func(tb testing.TB) { Start(tb) },
		"StartPrivate":           func(tb testing.TB) { StartPrivate(tb) },
		"StartCluster":           func(tb testing.TB) { StartCluster(tb) },
		"StartReplicatedCluster": func(tb testing.TB) { StartReplicatedCluster(tb) },
		"StartSentinel":          func(tb testing.TB) { StartSentinel(tb) },
	}
	needsCLI := map[string]bool{"StartCluster": true, "StartReplicatedCluster": true}
	server, serverErr := exec.LookPath(Binary)
	for _, tc := range []struct {
		env      string
		wantFail bool
	}{{"", false}, {"0", false}, {"1", true}} {
		for name, start := range starters {
			for _, withServer := range []bool{false, true} {
				if withServer && (!needsCLI[name] || serverErr != nil) {
					continue
				}
				missing := Binary
				if withServer {
					missing = CLI
				}
				t.Run(fmt.Sprintf("%s/env=%s/missing=%s", name, tc.env, missing), func(t *testing.T) {
					dir := t.TempDir()
					if withServer {
						if err := os.Symlink(server, filepath.Join(dir, Binary)); err != nil {
							t.Fatal(err)
						}
					}
					t.Setenv("PATH", dir)
					t.Setenv(RequireEnv, tc.env)
					ftb := &fakeTB{TB: t}
					done := make(chan struct{})
					go func() { defer close(done); start(ftb) }()
					<-done
					if ftb.failed != tc.wantFail || ftb.skipped == tc.wantFail {
						t.Fatalf("failed=%v skipped=%v (%q); want failed=%v", ftb.failed, ftb.skipped, ftb.msg, tc.wantFail)
					}
					if !strings.Contains(ftb.msg, missing) || !strings.Contains(ftb.msg, RequireEnv) {
						t.Errorf("message %q should name %s and %s", ftb.msg, missing, RequireEnv)
					}
				})
			}
		}
	}
}

// fakeTB intercepts Fatalf and Skipf; like the real ones, they end the
// calling goroutine.
type fakeTB struct {
	testing.TB
	failed, skipped bool
	msg             string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (f *fakeTB) Skipf(format string, args ...any) {
	f.skipped, f.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestStartFailureShowsOutput checks that a server dying at start-up is
// reported with its output, using a stand-in script for redis-server.
func TestStartFailureShowsOutput(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("needs /bin/sh")
	}
	bin := filepath.Join(t.TempDir(), Binary)
	script := "#!/bin/sh\necho 'FATAL CONFIG FILE ERROR (stand-in)' >&2\nexit 1\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := startServer(bin, t.TempDir(), false)
	if err == nil || !strings.Contains(err.Error(), "exited during start-up") ||
		!strings.Contains(err.Error(), "FATAL CONFIG FILE ERROR (stand-in)") {
		t.Fatalf("startServer error = %v; want start-up exit with the server's output", err)
	}
}
