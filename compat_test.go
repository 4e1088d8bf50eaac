package quotagate

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
)

// compatRev is the revision of this repository whose gates run beside
// the current ones in TestRollingUpgrade: the last before the feed's
// asks, whose gates neither write nor read them.
const compatRev = "3a8531e"

// TestRollingUpgrade runs a gate built from compatRev, in a process of
// its own, beside a gate of this tree on one redis-server and prefix, as
// in a rolling upgrade. Neither admits into a pause the other recorded:
// a scope either saw open before, or never met, and a gate of this tree
// that starts after the older one paused a scope. It needs the
// repository's history (git worktree); a clone without compatRev skips.
func TestRollingUpgrade(t *testing.T) {
	old := startCompatGate(t)
	srv := redistest.StartPrivate(t)
	prefix := srv.Prefix(t)
	old.start(t, srv.Addr, prefix)
	ctx := context.Background()
	g, trips := cachedGate(t, srv.Client(t), prefix, time.Now)
	cacheOpen(t, g, trips, Scope{Provider: "warm"})

	seen := Scope{Provider: "ups", Account: "seen"}
	for _, s := range []Scope{seen, {Provider: "ups", Account: "old-seen"}} { // both gates saw them open
		cacheOpen(t, g, trips, s)
		old.mustSay(t, "admit "+s.Account, "admitted")
	}
	if _, err := g.Pause(ctx, seen, time.Minute); err != nil {
		t.Fatal(err)
	}
	old.eventuallySays(t, "admit seen", "deferred")
	old.mustSay(t, "admit new-unseen", "admitted")
	if _, err := g.Pause(ctx, Scope{Provider: "ups", Account: "new-unseen"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	old.eventuallySays(t, "admit new-unseen", "deferred")

	old.mustSay(t, "pause old-seen 60", "paused")
	eventually(t, "the older gate's pause of a scope seen open heard", func() bool { return deferredPaused(g, Scope{Provider: "ups", Account: "old-seen"}) })
	old.mustSay(t, "pause old-unseen 60", "paused")
	eventually(t, "the older gate's pause of a scope never met heard", func() bool { return deferredPaused(g, Scope{Provider: "ups", Account: "old-unseen"}) })

	late, lateTrips := cachedGate(t, srv.Client(t), prefix, time.Now)
	cacheOpen(t, late, lateTrips, Scope{Provider: "warm"})
	for _, a := range []string{"old-seen", "old-unseen", "seen", "new-unseen"} {
		if !deferredPaused(late, Scope{Provider: "ups", Account: a}) {
			t.Errorf("a gate started after the pauses admits a task of ups/%s", a)
		}
	}
	old.mustSay(t, "resume old-unseen", "resumed")
	eventually(t, "the older gate's resume heard", func() bool {
		return g.admit(ctx, Scope{Provider: "ups", Account: "old-unseen"}, 1, false) == nil
	})
}

// compatGate is a gate of compatRev in a process of its own, driven by
// lines on its stdin ("admit <account>", "pause <account> <seconds>",
// "resume <account>", of provider ups), each answered by one line.
type compatGate struct {
	bin string
	in  io.WriteCloser
	out *bufio.Scanner
}

// compatMain is the older gate's process: a gate on the Redis and prefix
// of its arguments, its feed's interval 10 ms, its open cache an hour.
const compatMain = `package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/quotagate/quotagate"
	"github.com/redis/go-redis/v9"
)

func main() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Args[1]})
	g := quotagate.New(rdb, quotagate.Config{Prefix: os.Args[2], Tuning: quotagate.Tuning{OpenCache: time.Hour, FeedInterval: 10 * time.Millisecond, MaxHold: -1}})
	h := g.Middleware()(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }))
	in := bufio.NewScanner(os.Stdin)
	ctx := context.Background()
	for in.Scan() {
		f := strings.Fields(in.Text())
		s := quotagate.Scope{Provider: "ups", Account: f[1]}
		switch f[0] {
		case "admit":
			var d *quotagate.Deferral
			err := h.ProcessTask(ctx, quotagate.NewTask("poll", nil, s))
			switch {
			case err == nil:
				fmt.Println("admitted")
			case errors.As(err, &d):
				fmt.Println("deferred", d.Reason)
			default:
				fmt.Println("error", err)
			}
		case "pause":
			n, _ := strconv.Atoi(f[2])
			if _, err := g.Pause(ctx, s, time.Duration(n)*time.Second); err != nil {
				fmt.Println("error", err)
				continue
			}
			fmt.Println("paused")
		case "resume":
			if err := g.Resume(ctx, s); err != nil {
				fmt.Println("error", err)
				continue
			}
			fmt.Println("resumed")
		}
	}
}
`

// startCompatGate builds compatRev's gate program in a worktree of the
// repository, or skips the test when the history or git is missing.
func startCompatGate(t *testing.T) *compatGate {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not found: the older gate is built from the repository's history")
	}
	if err := exec.Command("git", "cat-file", "-e", compatRev+"^{commit}").Run(); err != nil {
		t.Skipf("revision %s not in this clone: the older gate is built from it", compatRev)
	}
	dir := filepath.Join(t.TempDir(), "old")
	if out, err := exec.Command("git", "worktree", "add", "--detach", dir, compatRev).CombinedOutput(); err != nil {
		t.Fatalf("git worktree add: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("git", "worktree", "remove", "--force", dir).Run() })
	if err := os.MkdirAll(filepath.Join(dir, "compatmain"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "compatmain", "main.go"), []byte(compatMain), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "oldgate")
	build := exec.Command("go", "build", "-o", bin, "./compatmain")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the gate of %s: %v\n%s", compatRev, err, out)
	}
	return &compatGate{bin: bin}
}

// start runs the older gate on the Redis at addr under prefix, until the
// test ends.
func (c *compatGate) start(t *testing.T, addr, prefix string) {
	t.Helper()
	cmd := exec.Command(c.bin, addr, prefix)
	var err error
	if c.in, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c.out = bufio.NewScanner(out)
	t.Cleanup(func() { c.in.Close(); cmd.Wait() })
}

// say sends line and returns the answer.
func (c *compatGate) say(line string) (string, error) {
	if _, err := fmt.Fprintln(c.in, line); err != nil {
		return "", err
	}
	if !c.out.Scan() {
		return "", errors.New("the older gate's process ended")
	}
	return c.out.Text(), nil
}

// mustSay sends line and fails unless the answer begins with want.
func (c *compatGate) mustSay(t *testing.T, line, want string) {
	t.Helper()
	if got, err := c.say(line); err != nil || !strings.HasPrefix(got, want) {
		t.Fatalf("older gate, %q: %q, %v; want %s", line, got, err, want)
	}
}

// eventuallySays sends line until the answer begins with want.
func (c *compatGate) eventuallySays(t *testing.T, line, want string) {
	t.Helper()
	eventually(t, fmt.Sprintf("the older gate answers %q with %s", line, want), func() bool {
		got, err := c.say(line)
		if err != nil {
			t.Fatal(err)
		}
		return strings.HasPrefix(got, want)
	})
}
