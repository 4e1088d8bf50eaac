package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate"
	"github.com/quotagate/quotagate/internal/redistest"
)

func TestMain(m *testing.M) {
	os.Unsetenv(envRedisURL) // never a Redis of the environment's: each test names its own
	redistest.Main(m)
}

// cmd runs the command and returns its exit status and outputs.
func cmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// odd is an account with every character the key encoding escapes.
var odd = quotagate.Scope{Provider: "acme", Account: "acct:{1}%7D%"}

// TestPausesAndResume: pauses recorded by the library show in the listing,
// table and JSON, and resume lifts them.
func TestPausesAndResume(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	prefix := srv.Prefix(t)
	url := "redis://" + srv.Addr + "/0"
	ctx := context.Background()
	g := quotagate.New(rdb, quotagate.Config{Prefix: prefix})
	defer g.Close()
	plain := quotagate.Scope{Provider: "swift", Account: quotagate.Fingerprint("secret")}
	for s, d := range map[quotagate.Scope]time.Duration{odd: 90 * time.Second, plain: time.Hour} {
		if _, err := g.Pause(ctx, s, d); err != nil {
			t.Fatal(err)
		}
	}
	// A pause under another prefix is not listed.
	other := quotagate.New(rdb, quotagate.Config{Prefix: prefix + "x"})
	if _, err := other.Pause(ctx, quotagate.Scope{Provider: "elsewhere"}, time.Hour); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := cmd(t, "-redis", url, "-prefix", prefix, "-json", "pauses")
	if code != 0 {
		t.Fatalf("pauses: exit %d: %s", code, errOut)
	}
	t.Logf("pauses -json:\n%s", out)
	var list []map[string]any
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("pauses -json: %v\n%s", err, out)
	}
	if len(list) != 2 {
		t.Fatalf("listed %d pauses, want 2:\n%s", len(list), out)
	}
	for i, want := range []struct {
		s quotagate.Scope
		d time.Duration
	}{{odd, 90 * time.Second}, {plain, time.Hour}} {
		p := list[i]
		if p["provider"] != want.s.Provider || p["account"] != want.s.Account {
			t.Errorf("pause %d: %v, want %v", i, p, want.s)
		}
		rem, ok := p["remaining_seconds"].(float64)
		if !ok || rem <= 0 || rem > want.d.Seconds() {
			t.Errorf("pause %d: remaining_seconds %v, want a number in (0, %v]", i, p["remaining_seconds"], want.d.Seconds())
		}
		until, _ := p["until"].(string)
		at, err := time.Parse(time.RFC3339, until)
		if err != nil || len(until) != len("2006-01-02T15:04:05.000Z") || !strings.HasSuffix(until, "Z") {
			t.Errorf("pause %d: until %q, want RFC 3339 in UTC with milliseconds (%v)", i, until, err)
		}
		if now := time.Now(); at.Before(now) || at.After(now.Add(want.d+time.Minute)) {
			t.Errorf("pause %d: until %v, not within the pause", i, at)
		}
	}

	code, out, _ = cmd(t, "-redis", url, "-prefix", prefix, "pauses")
	t.Logf("pauses:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "PROVIDER") ||
		!strings.Contains(lines[1], odd.Account) || !strings.Contains(lines[2], plain.Account) {
		t.Errorf("pauses table, exit %d:\n%s", code, out)
	}

	code, out, errOut = cmd(t, "-redis", url, "-prefix", prefix, "resume", odd.Provider, odd.Account)
	if code != 0 || !strings.Contains(out, "is open") {
		t.Errorf("resume: exit %d: %s%s", code, out, errOut)
	}
	if rem, err := g.Remaining(ctx, odd); err != nil || rem != 0 {
		t.Errorf("after resume the library reads %v, %v; want open", rem, err)
	}
	code, out, _ = cmd(t, "-redis", url, "-prefix", prefix, "-json", "pauses")
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list) != 1 || list[0]["provider"] != "swift" {
		t.Errorf("after resume: exit %d, %v:\n%s", code, err, out)
	}
}

// TestPauseAndState: a manual pause is monotonic, and state reads it.
func TestPauseAndState(t *testing.T) {
	srv := redistest.Start(t)
	prefix := srv.Prefix(t)
	url := "redis://" + srv.Addr
	g := quotagate.New(srv.Client(t), quotagate.Config{Prefix: prefix})
	defer g.Close()

	var st struct {
		Account          string
		Paused           bool
		Until            string
		RemainingSeconds float64 `json:"remaining_seconds"`
	}
	code, out, errOut := cmd(t, "-redis", url, "-prefix", prefix, "-json", "pause", odd.Provider, odd.Account, "10m")
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || !st.Paused || st.RemainingSeconds <= 590 || st.RemainingSeconds > 600 {
		t.Fatalf("pause 10m: exit %d, %v: %s%s", code, err, out, errOut)
	}
	first := st.Until
	// A shorter pause leaves the later deadline in force.
	code, out, _ = cmd(t, "-redis", url, "-prefix", prefix, "-json", "pause", odd.Provider, odd.Account, "1m")
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || st.Until != first {
		t.Errorf("pause 1m over 10m: exit %d, %v: until %q, want %q", code, err, st.Until, first)
	}
	p, err := g.State(context.Background(), odd)
	if err != nil || p.Until.UTC().Format(quotagate.RFC3339Milli) != first {
		t.Errorf("the library reads %+v, %v; want until %s", p, err, first)
	}

	code, out, _ = cmd(t, "-redis", url, "-prefix", prefix, "state", odd.Provider, odd.Account)
	if code != 0 || !strings.Contains(out, "is paused until "+first) {
		t.Errorf("state: exit %d: %s", code, out)
	}

	// Resumed, the scope still has a record (what the pause wrote beside
	// its deadline, if anything) or none: either way state does not claim
	// a pause.
	if code, out, errOut = cmd(t, "-redis", url, "-prefix", prefix, "resume", odd.Provider, odd.Account); code != 0 || !strings.Contains(out, "is open") {
		t.Errorf("resume: exit %d: %s%s", code, out, errOut)
	}
	if code, out, _ = cmd(t, "-redis", url, "-prefix", prefix, "state", odd.Provider, odd.Account); strings.Contains(out, "paused") {
		t.Errorf("state after resume: exit %d: %s", code, out)
	}
}

// TestUsage: -h prints the usage; bad flags, arguments and URLs exit 2,
// an unreachable Redis exits 1, each with a message.
func TestUsage(t *testing.T) {
	for _, h := range [][]string{{"-h"}, {"help"}, {"pauses", "-h"}} {
		code, out, _ := cmd(t, h...)
		for _, want := range []string{"usage: quotagate", "-redis address", "host:port", "resume PROVIDER ACCOUNT", envRedisURL, "before or after the command"} {
			if code != 0 || !strings.Contains(out, want) {
				t.Errorf("%q: exit %d, no %q in:\n%s", h, code, want, out)
			}
		}
	}
	// The help prints no address taken from the environment (it may hold a
	// password).
	t.Setenv(envRedisURL, "redis://u:hunter2@127.0.0.1:1")
	if _, out, _ := cmd(t, "-h"); strings.Contains(out, "hunter2") {
		t.Errorf("-h prints the environment's address:\n%s", out)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "redis://" + l.Addr().String()
	l.Close()

	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{nil, exitUsage, "missing COMMAND"},
		{[]string{"-bogus", "pauses"}, exitUsage, "flag provided but not defined"},
		{[]string{"list"}, exitUsage, `unknown command "list"`},
		{[]string{"state", "acme"}, exitUsage, "state takes 2 arguments, got 1"},
		{[]string{"pauses", "extra"}, exitUsage, "pauses takes 0 arguments"},
		{[]string{"pauses", "-json", "extra"}, exitUsage, "pauses takes 0 arguments, got 1"},
		{[]string{"pause", "acme", "a", "soon"}, exitUsage, "duration soon: not a duration; e.g. 90s"},
		{[]string{"pause", "acme", "a", "10"}, exitUsage, "duration 10: missing unit, e.g. 10s"},
		{[]string{"pause", "acme", "a", "1.5"}, exitUsage, "duration 1.5: missing unit, e.g. 1.5s"},
		{[]string{"pause", "acme", "a", ""}, exitUsage, `duration "": not a duration`},
		{[]string{"pause", "acme", "a", "13h"}, exitUsage, "duration 13h: longer than 12h0m0s"},
		{[]string{"pause", "acme", "a", "10ms"}, exitUsage, "duration 10ms: shorter than 1s"},
		{[]string{"state", "", "a"}, exitUsage, "quotagate: invalid scope: empty provider"},
		{[]string{"state", "acme", "a\x01hunter2"}, exitUsage, "invalid scope: account of provider"},
		{[]string{"state", "acme", "-a"}, exitUsage, "flag provided but not defined: -a"},
		{[]string{"-timeout", "0", "pauses"}, exitUsage, "-timeout"},
		{[]string{"-redis", "http://127.0.0.1:6379", "pauses"}, exitUsage, "-redis: redis: invalid URL scheme: http"},
		{[]string{"-redis", "127.0.0.1:6379,127.0.0.1:6380", "pauses"}, exitUsage, "add -cluster"},
		{[]string{"-redis", "127.0.0.1:notaport", "pauses"}, exitUsage, "-redis: invalid URL"},
		{[]string{"-redis", "redis://user:hunter2@127.0.0.1:notaport", "pauses"}, exitUsage, "-redis: invalid URL"},
		{[]string{"-cluster", "-redis", "ftp://x", "pauses"}, exitUsage, "-redis"},
		{[]string{"-redis", closed, "-timeout", "5s", "pauses"}, exitRedis, "cannot reach Redis at " + l.Addr().String()},
		{[]string{"-redis", closed, "-timeout", "5s", "resume", "acme", ""}, exitRedis, "cannot reach Redis"},
	} {
		code, out, errOut := cmd(t, c.args...)
		if code != c.code || !strings.Contains(errOut, c.msg) || out != "" {
			t.Errorf("%q: exit %d, stderr %q, stdout %q; want exit %d and %q", c.args, code, errOut, out, c.code, c.msg)
		}
		if strings.Contains(errOut, "hunter2") {
			t.Errorf("%q: the password is in the message %q", c.args, errOut)
		}
		if n := strings.Count(errOut, "quotagate:"); n != 1 {
			t.Errorf("%q: %q names the command %d times, want once", c.args, errOut, n)
		}
	}
}
