package quotagate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/feed"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/internal/schema"
)

// BenchmarkFanout measures a fleet on one Redis and on a 3-master Cluster:
// G gates (each on a client of its own, all in this process) admit tasks
// of fanoutScopes open scopes (nothing configured) from fanoutWorkers
// workers, each task's work taking fanoutTask after its admission
// (load=admit; none with load=idle, which measures what the
// pauses alone cost), while another gate records fanoutPauses pauses a
// second on as many other scopes (each for fanoutPauseFor), for
// fanoutFor. It reports
//
//   - redis-core/node: the busiest node's Redis CPU per second of wall
//     time (INFO cpu, before and after; every node's is logged);
//   - admits/s, p50-ms, p99-ms: the admissions and their latency;
//   - trips/admit: the store's scripts the gates sent per admission (the
//     feed's polls aside);
//   - know-p50-ms, know-p99-ms: from a pause's recording (its Pause
//     returned) to a gate's memory of it, over every gate and a sample of
//     the pauses (one in fanoutSample), looked at every 10 ms;
//   - all-p99-ms: ... to every gate's;
//   - missed: sampled pauses some gate did not know within fanoutMiss;
//   - exposed: sampled pauses that some gate would have admitted a task
//     of without a round trip (its feed live and fresh, the scope no ask)
//     fanoutStale after their recording, while they were in force: a gate
//     whose feed is stale asks Redis for every task, and admits into no
//     pause it does not know;
//   - gaps, runs, moved: over every gate, the feed's snapshots beyond the
//     first (each after a failed or late poll), the failover memory's
//     re-assertion runs, and the deadlines they moved.
//
// The hold load measures the holders at fleet scale: 10 gates of 4
// workers each run tasks through the Middleware (the holds at its
// default MaxHold) of fanoutHoldScopes scopes, of which the pausing gate
// pauses fanoutHoldPauses a second; hold-open is the same load with no
// pause, the rate to compare with. Their admits/s and latency count
// every admission decided, run or deferred.
//
// The failover and migrate loads run the admit load on a replicated
// Cluster (3 masters, each with a replica; topology "replicated") and, a
// third into the run, kill the master of a feed group's slot (its replica
// is promoted) or move that slot to another master one key at a time: a
// pause recorded (its Pause returned) must still reach every gate
// (missed: 0). A Pause that fails while the slot moves or the master is
// down records nothing and is counted apart (failed). failover-durable
// is failover with the pausing gate's Config.Durable at 1.
//
// A fresh server or Cluster per case. Run:
//
//	go test -run '^$' -bench BenchmarkFanout -benchtime 1x .
func BenchmarkFanout(b *testing.B) {
	for _, topo := range []string{"redis", "cluster", "replicated"} {
		for _, l := range fanoutLoads {
			if (topo == "replicated") != (l.event != nil) {
				continue // an event needs the replicated Cluster, and only it
			}
			for _, g := range l.gates {
				b.Run(fmt.Sprintf("%s/%s/gates=%d", topo, l.name, g), func(b *testing.B) {
					for range b.N {
						runFanout(b, topo, g, l)
					}
				})
			}
		}
	}
}

// fanoutLoad is a load of the fan-out benchmark: its workers (in all),
// the scopes they admit (provider workOn, scopes of them), and the
// pauses a second the pausing gate records on as many scopes of the
// provider "busy"; middleware: the tasks run through each gate's
// Middleware, holds on, instead of its admission alone, holds off; event,
// what happens to the replicated Cluster a third into the run (nil:
// nothing, on one Redis or a plain Cluster), with pauses that outlast it
// (pauseFor), so that a pause recorded just before it is still in force
// when the feed is back.
type fanoutLoad struct {
	name       string
	gates      []int
	workers    int
	workOn     string
	scopes     int
	pauses     int
	middleware bool
	event      func(b *testing.B, c *redistest.Cluster, prefix string)
	pauseFor   time.Duration // each pause's length (0: fanoutPauseFor)
	durable    int           // the pausing gate's Config.Durable
}

var fanoutLoads = []fanoutLoad{
	{name: "idle", gates: []int{10, 100, 500}, workOn: "open", scopes: fanoutScopes, pauses: fanoutPauses},
	{name: "admit", gates: []int{10, 100, 500}, workers: fanoutWorkers, workOn: "open", scopes: fanoutScopes, pauses: fanoutPauses},
	{name: "hold", gates: []int{10}, workers: 40, workOn: "busy", scopes: fanoutHoldScopes, pauses: fanoutHoldPauses, middleware: true},
	{name: "hold-open", gates: []int{10}, workers: 40, workOn: "busy", scopes: fanoutHoldScopes, middleware: true},
	{name: "failover", gates: []int{10, 100}, workers: fanoutWorkers, workOn: "open", scopes: fanoutScopes, pauses: fanoutPauses,
		event: fanoutKill, pauseFor: fanoutEventPause},
	{name: "failover-durable", gates: []int{10, 100}, workers: fanoutWorkers, workOn: "open", scopes: fanoutScopes, pauses: fanoutPauses,
		event: fanoutKill, pauseFor: fanoutEventPause, durable: 1},
	{name: "migrate", gates: []int{10, 100}, workers: fanoutWorkers, workOn: "open", scopes: fanoutScopes, pauses: fanoutPauses,
		event: func(b *testing.B, c *redistest.Cluster, prefix string) {
			from, to := c.MigrateSlot(b, fanoutGroupSlot(b, c, prefix), 10*time.Millisecond)
			b.Logf("moved feed group 0's slot from %s to %s", from, to)
		}, pauseFor: fanoutEventPause},
}

// fanoutKill kills the master of feed group 0's slot, and waits until its
// replica is promoted.
func fanoutKill(b *testing.B, c *redistest.Cluster, prefix string) {
	master := fanoutGroupMaster(b, c, prefix)
	b.Logf("killed %s, the master of feed group 0; %s promoted", master, c.KillMaster(b, master))
}

// fanoutGroupSlot is the slot of feed group 0's keys.
func fanoutGroupSlot(b *testing.B, c *redistest.Cluster, prefix string) int {
	log, _, _ := schema.FeedKeys(prefix, 0)
	slot, err := c.Client(b).ClusterKeySlot(context.Background(), log).Result()
	if err != nil {
		b.Fatal(err)
	}
	return int(slot)
}

// fanoutGroupMaster is the address of the master that serves feed group
// 0's slot.
func fanoutGroupMaster(b *testing.B, c *redistest.Cluster, prefix string) string {
	slot := fanoutGroupSlot(b, c, prefix)
	for _, m := range c.Masters(b) {
		slots, err := c.NodeClient(b, m, false).ClusterSlots(context.Background()).Result()
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range slots {
			if slot >= int(r.Start) && slot <= int(r.End) && len(r.Nodes) > 0 && r.Nodes[0].Addr == m {
				return m
			}
		}
	}
	b.Fatalf("no master serves slot %d", slot)
	return ""
}

const (
	fanoutScopes     = 10_000
	fanoutWorkers    = 16
	fanoutPauses     = 167 // a second: 10,000 scopes pausing once a minute
	fanoutHoldScopes = 1000
	fanoutHoldPauses = 100
	fanoutPauseFor   = 2 * time.Second
	// fanoutEventPause is a pause's length with an event: longer than a
	// master's promotion (a few seconds with the replicated Cluster's
	// node timeout) and within fanoutMiss.
	fanoutEventPause = 4 * time.Second
	fanoutFor        = 5 * time.Second
	// fanoutTask is a task's work after its admission: without it, the
	// workers of a gate that admits open scopes without a round trip spin
	// on the process's cores and starve the gates' feeds and the pausing
	// gate, which this benchmark times.
	fanoutTask   = time.Millisecond
	fanoutSample = 20
	// fanoutWriterTimeout is the pausing gate's StoreTimeout.
	fanoutWriterTimeout = 5 * time.Second
	fanoutMiss          = 5 * time.Second
	// fanoutStale is the staleness issue 30 allows: a live gate (one that
	// admits open scopes without a round trip) that does not know a pause
	// this long after its recording may admit into it (exposed).
	fanoutStale = 250 * time.Millisecond
)

// fanoutEnv is one case's Redis: a client per gate, and one per node for
// INFO.
type fanoutEnv struct {
	prefix  string
	client  func() redis.UniversalClient // a new client, closed with the case
	nodes   []*redis.Client
	cluster *redistest.Cluster // the replicated Cluster (nil: another topology)
}

func newFanoutEnv(b *testing.B, topo string) fanoutEnv {
	switch topo {
	case "replicated": // no CPU figures: a node killed has none to give
		c := redistest.StartReplicatedCluster(b)
		return fanoutEnv{prefix: c.Prefix(b), cluster: c, client: func() redis.UniversalClient { return c.Client(b) }}
	case "cluster":
		c := redistest.StartCluster(b)
		e := fanoutEnv{prefix: c.Prefix(b), client: func() redis.UniversalClient {
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, PoolSize: 2})
			b.Cleanup(func() { rdb.Close() })
			return rdb
		}}
		for _, a := range c.Addrs {
			n := redis.NewClient(&redis.Options{Addr: a})
			b.Cleanup(func() { n.Close() })
			e.nodes = append(e.nodes, n)
		}
		return e
	}
	srv := redistest.StartPrivate(b)
	return fanoutEnv{prefix: srv.Prefix(b), nodes: []*redis.Client{srv.Client(b)}, client: func() redis.UniversalClient {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 2})
		b.Cleanup(func() { rdb.Close() })
		return rdb
	}}
}

// scriptCount counts the store's scripts (EVALSHA) sent on the clients
// it hooks.
type scriptCount struct{ atomic.Int64 }

func (*scriptCount) DialHook(next redis.DialHook) redis.DialHook { return next }
func (n *scriptCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" && !feed.Owns(cmd) {
			n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (*scriptCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func runFanout(b *testing.B, topo string, n int, l fanoutLoad) {
	b.StopTimer()
	e := newFanoutEnv(b, topo)
	trips := new(scriptCount)
	quiet := slog.New(slog.DiscardHandler) // a failover's warnings would break the benchmark's lines
	if l.event != nil {
		redis.SetLogger(discardRedisLog{}) // and so would go-redis's, of its dials to the dead master
	}
	gates := make([]*Gate, n)
	tuning := Tuning{MaxHold: -1}
	if l.middleware {
		tuning = Tuning{}
	}
	for i := range gates {
		rdb := e.client()
		rdb.AddHook(trips)
		gates[i] = New(rdb, Config{Prefix: e.prefix, Tuning: tuning, Logger: quiet})
		b.Cleanup(func() { gates[i].Close() })
		if err := gates[i].admit(context.Background(), Scope{Provider: "warm", Account: strconv.Itoa(i)}, 1, false); err != nil {
			b.Fatal(err) // starts its feed
		}
	}
	for _, g := range gates {
		redistest.Eventually(b, 30*time.Second, "every gate's feed live", g.open.Live)
	}
	// The pausing gate is the load, not a gate measured: its calls wait
	// up to fanoutWriterTimeout, so a process starved by hundreds of
	// gates' feeds still records every pause (the gates' own calls keep
	// the default StoreTimeout).
	writer := New(e.client(), Config{Prefix: e.prefix, StoreTimeout: fanoutWriterTimeout, Logger: quiet, Durable: l.durable})
	b.Cleanup(func() { writer.Close() })
	if l.event != nil {
		writer.Middleware() // its feed, as a worker's gate has: after a gap it announces again what the feed lost
	}

	cpu0 := make([]time.Duration, len(e.nodes))
	for i, nd := range e.nodes {
		cpu0[i] = redistest.CPU(b, nd)
		if err := nd.ConfigResetStat(context.Background()).Err(); err != nil {
			b.Fatal(err)
		}
	}
	trips0, start := trips.Load(), time.Now()
	gaps0, runs0, moved0 := fanoutHealth(gates)
	ctx, stop := context.WithTimeout(context.Background(), fanoutFor)
	defer stop()
	b.StartTimer()
	handlers := make([]asynq.Handler, n) // each gate's Middleware, built once (nil: admissions alone)
	for i, g := range gates {
		if l.middleware {
			handlers[i] = fanoutHandler(g)
		}
	}
	var wg sync.WaitGroup
	if l.event != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(fanoutFor / 3)
			l.event(b, e.cluster, e.prefix)
		}()
	}
	var failed atomic.Int64 // admissions that failed while the Cluster changed
	lat := make([][]time.Duration, l.workers)
	for w := range l.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; ctx.Err() == nil; i += l.workers { // every gate's turn, or a gate's own workers
				s := Scope{Provider: l.workOn, Account: strconv.Itoa(rand.IntN(l.scopes))}
				d, err := fanoutTaskRun(ctx, gates[i%n], handlers[i%n], s)
				if err != nil && ctx.Err() == nil && l.event != nil {
					failed.Add(1)
					continue
				}
				if err != nil && ctx.Err() == nil {
					b.Error(err)
					return
				}
				lat[w] = append(lat[w], d)
			}
		}()
	}
	know := fanoutPausing(ctx, b, writer, gates, e.prefix, l)
	wg.Wait()
	b.StopTimer()
	wall := time.Since(start)
	admits := 0
	var all []time.Duration
	for _, l := range lat {
		admits += len(l)
		all = append(all, l...)
	}
	busiest := 0.0
	for i, nd := range e.nodes {
		core := float64(redistest.CPU(b, nd)-cpu0[i]) / float64(wall)
		b.Logf("node %d: %.3f of a core; scripts: %s", i, core, fanoutReads(b, nd))
		busiest = max(busiest, core)
	}
	b.ReportMetric(busiest, "redis-core/node")
	b.ReportMetric(float64(admits)/wall.Seconds(), "admits/s")
	b.ReportMetric(ms(quantile(all, 0.5)), "p50-ms")
	b.ReportMetric(ms(quantile(all, 0.99)), "p99-ms")
	b.ReportMetric(float64(trips.Load()-trips0)/float64(max(admits, 1)), "trips/admit")
	b.ReportMetric(ms(quantile(know.each, 0.5)), "know-p50-ms")
	b.ReportMetric(ms(quantile(know.each, 0.99)), "know-p99-ms")
	b.ReportMetric(ms(quantile(know.every, 0.99)), "all-p99-ms")
	b.ReportMetric(float64(know.missed), "missed")
	b.ReportMetric(float64(know.exposed), "exposed")
	if l.event != nil {
		b.ReportMetric(float64(know.failed), "failed")
		b.ReportMetric(float64(know.recorded), "recorded")
		b.ReportMetric(float64(failed.Load()), "admit-errors")
	}
	gaps, runs, moved := fanoutHealth(gates)
	b.ReportMetric(float64(gaps-gaps0), "gaps")
	b.ReportMetric(float64(runs-runs0), "runs")
	b.ReportMetric(float64(moved-moved0), "moved")
}

// discardRedisLog is a go-redis logger that says nothing.
type discardRedisLog struct{}

func (discardRedisLog) Printf(context.Context, string, ...any) {}

// fanoutTaskRun runs one task of s on g, a millisecond of work
// (fanoutTask) once admitted, and returns how long its admission took to
// decide: through h, g's Middleware (fanoutHandler), until the handler
// ran or the task was deferred, or, h nil, through its admission alone.
func fanoutTaskRun(ctx context.Context, g *Gate, h asynq.Handler, s Scope) (time.Duration, error) {
	st := &fanoutStart{t0: time.Now()}
	if h == nil {
		err := g.admit(ctx, s, 1, false)
		d := time.Since(st.t0)
		time.Sleep(fanoutTask)
		return d, err
	}
	err := h.ProcessTask(context.WithValue(ctx, fanoutKey{}, st), NewTask("poll", nil, s))
	var def *Deferral
	if errors.As(err, &def) {
		return time.Since(st.t0), nil
	}
	return st.d, err
}

// fanoutStart is one task's start, and how long its admission took to
// decide, set by the handler (fanoutHandler).
type fanoutStart struct {
	t0 time.Time
	d  time.Duration
}

// fanoutKey is the context key of a task's fanoutStart.
type fanoutKey struct{}

// fanoutHandler is g's Middleware around a task's work: it notes when
// the task was admitted, then works fanoutTask.
func fanoutHandler(g *Gate) asynq.Handler {
	return g.Middleware()(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		st := ctx.Value(fanoutKey{}).(*fanoutStart)
		st.d = time.Since(st.t0)
		time.Sleep(fanoutTask)
		return nil
	}))
}

// fanoutHealth sums, over gates, the feed's snapshots, the failover
// memory's runs and the deadlines its re-assertions moved.
func fanoutHealth(gates []*Gate) (snapshots, runs, moved int64) {
	for _, g := range gates {
		snapshots += g.feed.Snapshots()
		runs += g.mem.Runs()
		moved += g.mem.Reasserted()
	}
	return snapshots, runs, moved
}

// fanoutKnown is how soon the gates knew the sampled pauses: each gate's
// delay for each, every gate's (the last of them) for each, and the
// pauses some gate never knew.
type fanoutKnown struct {
	each, every []time.Duration
	missed      int
	exposed     int // sampled pauses some gate admitted without a round trip fanoutStale after their recording, while in force
	recorded    int // pauses recorded (Pause returned no error)
	failed      int // pauses that failed (with an event: see BenchmarkFanout)
}

// fanoutPausing records l.pauses pauses a second through writer until
// ctx ends, and watches the gates learn a sample of them, until every
// gate knew each or fanoutMiss passed.
func fanoutPausing(ctx context.Context, b *testing.B, writer *Gate, gates []*Gate, prefix string, l fanoutLoad) fanoutKnown {
	type sample struct {
		key     string
		at      time.Time
		known   []bool
		left    int
		exposed bool // a gate admitted its scope without a round trip fanoutStale after it, while in force
	}
	pauseFor := cmp.Or(l.pauseFor, fanoutPauseFor)
	var out fanoutKnown
	var open []*sample
	if l.pauses == 0 {
		<-ctx.Done()
		return out
	}
	tick := time.NewTicker(time.Second / time.Duration(l.pauses))
	defer tick.Stop()
	look := time.NewTicker(10 * time.Millisecond)
	defer look.Stop()
	for i := 0; ctx.Err() == nil || len(open) > 0; {
		select {
		case <-tick.C:
			if ctx.Err() != nil {
				continue
			}
			s := Scope{Provider: "busy", Account: strconv.Itoa(i % l.scopes)}
			_, err := writer.Pause(context.Background(), s, pauseFor)
			switch {
			case err != nil && l.event != nil:
				out.failed++
			case err != nil:
				b.Error(err)
			default:
				out.recorded++
			}
			if err == nil && i%fanoutSample == 0 {
				open = append(open, &sample{key: scopeKeys(prefix, s).Pause, at: time.Now(), known: make([]bool, len(gates)), left: len(gates)})
			}
			i++
		case now := <-look.C:
			open = slices.DeleteFunc(open, func(s *sample) bool {
				for j, g := range gates {
					if _, ok := g.mem.Get(s.key, now); ok && !s.known[j] {
						s.known[j], s.left = true, s.left-1
						out.each = append(out.each, now.Sub(s.at))
					}
					age := now.Sub(s.at)
					if !s.known[j] && !s.exposed && age > fanoutStale && age < pauseFor && g.admitsUncached(s.key) {
						s.exposed = true
						out.exposed++
					}
				}
				switch {
				case s.left == 0:
					out.every = append(out.every, now.Sub(s.at))
					return true
				case now.Sub(s.at) > fanoutMiss:
					out.missed++
					return true
				}
				return false
			})
		}
	}
	return out
}

// quantile is the q-quantile of ds (0 for none).
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// fanoutReads is what INFO commandstats says of the scripts on nd (the
// feed's polls, most of them, and the store's): calls and µs per call.
func fanoutReads(b *testing.B, nd *redis.Client) string {
	stats, err := nd.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var out []string
	for k, v := range redistest.ParseInfo(stats) {
		if k == "cmdstat_evalsha" || k == "cmdstat_eval" {
			calls, per, _ := strings.Cut(v, ",usec=")
			_, per, _ = strings.Cut(per, "usec_per_call=")
			per, _, _ = strings.Cut(per, ",")
			out = append(out, strings.TrimPrefix(k, "cmdstat_")+" "+calls+" µs/call="+per)
		}
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}
