package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/internal/schema"
)

// closedAddr returns a loopback host:port where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestRedisURL: the address forms people type become the URL go-redis
// parses.
func TestRedisURL(t *testing.T) {
	for _, c := range []struct {
		in      string
		cluster bool
		want    string
	}{
		{"127.0.0.1:6379", false, "redis://127.0.0.1:6379"},
		{"localhost", false, "redis://localhost"},
		{"[::1]:6380/2", false, "redis://[::1]:6380/2"},
		{"redis://u:p@h:1/3", false, "redis://u:p@h:1/3"},
		{"rediss://h:1", false, "rediss://h:1"},
		{"a:1,b:2,c:3", true, "redis://a:1?addr=b%3A2&addr=c%3A3"},
		{"a:1", true, "redis://a:1"},
		{"redis://a:1?addr=b:2", true, "redis://a:1?addr=b:2"},
	} {
		got, err := redisURL(c.in, c.cluster)
		if err != nil || got != c.want {
			t.Errorf("redisURL(%q, %v) = %q, %v; want %q", c.in, c.cluster, got, err, c.want)
		}
	}
	for _, c := range []struct {
		in      string
		cluster bool
	}{{"a:1,b:2", false}, {"a:1,", true}, {"a:1,b:2/0", true}} {
		if got, err := redisURL(c.in, c.cluster); err == nil {
			t.Errorf("redisURL(%q, %v) = %q, want an error", c.in, c.cluster, got)
		}
	}
}

// TestAddressForms: host:port and URLs reach the same Redis, from -redis
// or from the environment; -redis wins over the environment, and a bad
// address from the environment is named as such, without its password.
func TestAddressForms(t *testing.T) {
	srv := redistest.Start(t)
	prefix := srv.Prefix(t)
	for _, addr := range []string{srv.Addr, "redis://" + srv.Addr, "redis://" + srv.Addr + "/0"} {
		if code, out, errOut := cmd(t, "-redis", addr, "-prefix", prefix, "pauses"); code != 0 || !strings.Contains(out, "no pause in force") {
			t.Errorf("-redis %s: exit %d: %s%s", addr, code, out, errOut)
		}
	}

	t.Setenv(envRedisURL, srv.Addr)
	if code, out, errOut := cmd(t, "-prefix", prefix, "pauses"); code != 0 || !strings.Contains(out, "no pause in force") {
		t.Errorf("%s=%s: exit %d: %s%s", envRedisURL, srv.Addr, code, out, errOut)
	}

	t.Setenv(envRedisURL, closedAddr(t))
	if code, _, errOut := cmd(t, "-redis", srv.Addr, "-prefix", prefix, "pauses"); code != 0 {
		t.Errorf("-redis over %s: exit %d: %s", envRedisURL, code, errOut)
	}
	if code, _, errOut := cmd(t, "-prefix", prefix, "-timeout", "5s", "pauses"); code != exitRedis || !strings.Contains(errOut, "cannot reach Redis") {
		t.Errorf("%s of a closed port: exit %d: %s", envRedisURL, code, errOut)
	}

	t.Setenv(envRedisURL, "redis://u:hunter2@127.0.0.1:notaport")
	code, _, errOut := cmd(t, "pauses")
	if code != exitUsage || !strings.HasPrefix(errOut, "quotagate: "+envRedisURL+": invalid URL") || strings.Contains(errOut, "hunter2") {
		t.Errorf("bad %s: exit %d: %q", envRedisURL, code, errOut)
	}
}

// TestFlagsAnywhere: flags work before the command, after it and among
// its arguments; after -- a word that looks like a flag is an argument.
func TestFlagsAnywhere(t *testing.T) {
	srv := redistest.Start(t)
	prefix := srv.Prefix(t)
	g := quotagate.New(srv.Client(t), quotagate.Config{Prefix: prefix})
	defer g.Close()
	ctx := context.Background()
	dash := quotagate.Scope{Provider: "acme", Account: "-acct"}
	for _, s := range []quotagate.Scope{odd, dash} {
		if _, err := g.Pause(ctx, s, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	r := []string{"-redis", srv.Addr, "-prefix", prefix}
	for _, args := range [][]string{
		append([]string{"-json", "pauses"}, r...),
		append([]string{"pauses", "-json"}, r...),
		append(append([]string{"pauses"}, r...), "-json"),
		append(r, "pauses", "-json=true"),
	} {
		code, out, errOut := cmd(t, args...)
		var list []map[string]any
		if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list) != 2 {
			t.Errorf("%q: exit %d, %v: %s%s", args, code, err, out, errOut)
		}
	}
	for _, c := range []struct {
		args []string
		want string // the account
	}{
		{append([]string{"state", odd.Provider, "-json", odd.Account}, r...), odd.Account},
		{append(append([]string{"state", odd.Provider, odd.Account}, r...), "-json"), odd.Account},
		{append(r, "-json", "state", "--", odd.Provider, odd.Account), odd.Account},
		{append(r, "-json", "state", dash.Provider, "--", dash.Account), dash.Account},
	} {
		args, want := c.args, c.want
		code, out, errOut := cmd(t, args...)
		var st struct {
			Account string
			Paused  bool
		}
		if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || !st.Paused || st.Account != want {
			t.Errorf("%q: exit %d, %v: %s%s; want the pause of account %q", args, code, err, out, errOut, want)
		}
	}
	// "--" as a flag's value is not the end of the flags.
	if code, _, errOut := cmd(t, "-redis", srv.Addr, "-prefix", "--", "pauses", "-json"); code != 0 {
		t.Errorf("-prefix --: exit %d: %s", code, errOut)
	}
}

// TestNoSuchScope: state and resume of a scope Redis holds nothing for
// say so and exit 1, without the account in the message; they create
// nothing, and a scope of another prefix is not this prefix's.
func TestNoSuchScope(t *testing.T) {
	srv := redistest.Start(t)
	prefix := srv.Prefix(t)
	g := quotagate.New(srv.Client(t), quotagate.Config{Prefix: prefix + "x"})
	defer g.Close()
	typo := quotagate.Scope{Provider: "ups", Account: "typo-hunter2"}
	if _, err := g.Pause(context.Background(), typo, time.Hour); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the first answer created nothing
		for _, command := range []string{"state", "resume"} {
			code, out, errOut := cmd(t, "-redis", srv.Addr, "-prefix", prefix, command, typo.Provider, typo.Account)
			if code != exitRedis || out != "" || !strings.HasPrefix(errOut, `quotagate: no such scope: nothing is recorded for provider "ups"`) ||
				!strings.Contains(errOut, `prefix "`+prefix+`"`) || strings.Contains(errOut, "hunter2") {
				t.Errorf("%s of a scope with no record: exit %d, stdout %q, stderr %q", command, code, out, errOut)
			}
		}
	}
	if rem, err := g.Remaining(context.Background(), typo); err != nil || rem <= 0 {
		t.Errorf("the other prefix's pause: %v, %v; want it untouched", rem, err)
	}
	if code, out, errOut := cmd(t, "-redis", srv.Addr, "-prefix", prefix+"x", "state", typo.Provider, typo.Account); code != 0 || !strings.Contains(out, "is paused") {
		t.Errorf("state under its own prefix: exit %d: %s%s", code, out, errOut)
	}
}

// numberedKind matches the numbered limit keys: tat2, win3, slog2, conc2, ...
var numberedKind = regexp.MustCompile(`^(tat|win|slog|conc)[0-9]+$`)

// fillScope makes a gate write every kind of key it can for s: a pause
// refused by the provider, limits (a GCRA one and a fixed window, so a
// numbered key), the budget a response advertised.
func fillScope(t *testing.T, rdb redis.UniversalClient, prefix string, s quotagate.Scope) {
	t.Helper()
	ctx := context.Background()
	g := quotagate.New(rdb, quotagate.Config{Prefix: prefix, Logger: slog.New(slog.DiscardHandler), Limits: map[string][]quotagate.Limit{
		s.Provider: {quotagate.PerSecond(100, 100), quotagate.FixedWindow(1000, time.Hour)},
	}})
	defer g.Close()
	mux := asynq.NewServeMux()
	mux.Use(g.Middleware())
	refuse := true
	mux.HandleFunc("poll", func(context.Context, *asynq.Task) error {
		if refuse {
			return &quotagate.Refusal{} // unhinted: the windows' counts stay (a hint would realign them)
		}
		return nil
	})
	if err := g.Observe(ctx, s, &http.Response{StatusCode: http.StatusOK, Header: http.Header{
		"X-Ratelimit-Limit": {"5000"}, "X-Ratelimit-Remaining": {"4000"}, "X-Ratelimit-Reset": {"600"},
	}}); err != nil {
		t.Fatal(err)
	}
	refused := mux.ProcessTask(ctx, quotagate.NewTask("poll", nil, s))
	if !quotagate.IsFailure(refused) {
		t.Fatalf("the refused task: %v", refused)
	}
}

// scopeKeysIn returns the keys of scopes under prefix (not the feed's:
// schema.KeyPattern), by SCAN on every master.
func scopeKeysIn(t *testing.T, rdb redis.UniversalClient, prefix string) []string {
	t.Helper()
	var all []string
	scan := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, schema.KeyPattern(prefix), 1000).Iterator()
		for iter.Next(ctx) {
			all = append(all, iter.Val())
		}
		return iter.Err()
	}
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex // ForEachMaster calls in parallel
		err = c.ForEachMaster(context.Background(), func(ctx context.Context, n *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return scan(ctx, n)
		})
	case *redis.Client:
		err = scan(context.Background(), c)
	}
	if err != nil {
		t.Fatal(err)
	}
	return all
}

// TestKeysMatchTheLibrary: every key a Gate writes for a scope starts with
// the command's scopeKeyBase and is of a kind it knows, on a server and on
// a cluster; the record check finds the scope by any of them, numbered
// limits included.
func TestKeysMatchTheLibrary(t *testing.T) {
	t.Run("server", func(t *testing.T) {
		srv := redistest.Start(t)
		testKeysMatch(t, srv.Client(t), srv.Prefix(t), []string{"-redis", srv.Addr})
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t)
		testKeysMatch(t, c.Client(t), c.Prefix(t), []string{"-cluster", "-redis", strings.Join(c.Addrs, ",")})
	})
}

func testKeysMatch(t *testing.T, rdb redis.UniversalClient, prefix string, r []string) {
	ctx := context.Background()
	fillScope(t, rdb, prefix, odd)
	keys := scopeKeysIn(t, rdb, prefix)
	base := scopeKeyBase(prefix, odd)
	kinds := map[string]bool{}
	for _, k := range keys {
		kind, ok := strings.CutPrefix(k, base)
		if !ok || !(numberedKind.MatchString(kind) || slices.Contains(schema.Kinds, kind)) {
			t.Errorf("key %q: not %q followed by a known kind", k, base)
		}
		kinds[kind] = true
	}
	for _, want := range []string{"pause", "tat", "win2", "budget"} {
		if !kinds[want] {
			t.Errorf("no %s key among %q", want, keys)
		}
	}
	r = slices.Concat(r, []string{"-prefix", prefix})
	state := slices.Concat(r, []string{"state", odd.Provider, odd.Account})
	if code, out, errOut := cmd(t, state...); code != 0 || !strings.Contains(out, "is paused") {
		t.Errorf("state: exit %d: %s%s", code, out, errOut)
	}

	// The numbered limit alone is found (by the SCAN), and resumed.
	for _, k := range keys {
		if k != base+"win2" {
			if err := rdb.Del(ctx, k).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if code, out, errOut := cmd(t, slices.Concat(r, []string{"resume", odd.Provider, odd.Account})...); code != 0 || !strings.Contains(out, "is open") {
		t.Errorf("resume of a scope with only its second limit's key: exit %d: %s%s", code, out, errOut)
	}
	if err := rdb.Del(ctx, base+"win2").Err(); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := cmd(t, state...); code != exitRedis || !strings.Contains(errOut, "no such scope") {
		t.Errorf("state with every key gone: exit %d: %s", code, errOut)
	}
}

// TestLibMessage: the library's errors lose its name, in front and where
// it wraps its own, and keep what they wrap.
func TestLibMessage(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{quotagate.Scope{}.Validate(), "invalid scope: empty provider"},
		{fmt.Errorf("quotagate: pause acme: %w", fmt.Errorf("%w after 10s: i/o timeout", quotagate.ErrStoreTimeout)), "pause acme: store timeout after 10s: i/o timeout"},
		{fmt.Errorf("quotagate: list pauses: %w at 10000 pauses", quotagate.ErrTruncated), "list pauses: listing truncated at 10000 pauses"},
	} {
		if got := libMessage(c.err); got != c.want {
			t.Errorf("libMessage(%q) = %q, want %q", c.err, got, c.want)
		}
	}
	err := libError{"Redis at 127.0.0.1:6379", fmt.Errorf("quotagate: state of acme: %w", quotagate.ErrStoreTimeout)}
	if got := err.Error(); got != "Redis at 127.0.0.1:6379: state of acme: store timeout" || !errors.Is(err, quotagate.ErrStoreTimeout) {
		t.Errorf("libError: %q, errors.Is ErrStoreTimeout %v", got, errors.Is(err, quotagate.ErrStoreTimeout))
	}
}
