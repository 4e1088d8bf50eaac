package quotagate

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestPriorityClasses: a sweep saturates a scope's configured window while
// a person's polls arrive on an interactive queue that asynq serves first
// (strict priority) and, by NewTask's option, on the sweep's queue; on
// real asynq servers over miniredis, a redis-server and a Redis Cluster.
// Every task completes, no deferral spends a retry, and every person's
// poll is counted as interactive (by its queue or its header). The
// reserve's effect on waits is the model's (TestClassSteps, TestClassGCRA)
// and the example's -priority benchmark: this test carries no timing.
func TestPriorityClasses(t *testing.T) {
	mwOnBackends(t, func(t *testing.T, e *mwEnv) {
		iq := e.queue + "-interactive"
		s := Scope{Provider: "acme", Account: "sweep"}
		g := e.gate(Config{Limits: map[string][]Limit{"acme": {FixedWindow(10, time.Second)}}, InteractiveQueues: []string{iq}})
		defer g.Close()

		var mu sync.Mutex
		admitted := map[Class]int{}
		mux := asynq.NewServeMux()
		mux.Use(g.Middleware())
		mux.HandleFunc(mwTaskType, func(ctx context.Context, t *asynq.Task) error {
			c := g.classOf(ctx, t)
			mu.Lock()
			admitted[c]++
			mu.Unlock()
			return nil
		})
		srv := asynq.NewServer(e.b.asynqOpt(), asynq.Config{
			Concurrency:              20,
			Queues:                   map[string]int{iq: 6, e.queue: 1},
			StrictPriority:           true,
			IsFailure:                IsFailure,
			RetryDelayFunc:           g.RetryDelay(nil),
			DelayedTaskCheckInterval: 100 * time.Millisecond,
			TaskCheckInterval:        20 * time.Millisecond,
			ShutdownTimeout:          3 * time.Second,
			LogLevel:                 asynq.FatalLevel,
		})
		const sweep, person = 50, 4
		var ids []string
		for i := range sweep {
			ids = append(ids, e.enqueue(NewTask(mwTaskType, []byte(fmt.Sprint("sweep", i)), s), asynq.Retention(time.Minute)))
		}
		if err := srv.Start(mux); err != nil {
			t.Fatalf("asynq server: %v", err)
		}
		defer srv.Shutdown()
		var iids []string
		for i := range person {
			time.Sleep(time.Second) // the sweep saturates the window meanwhile
			opts := []asynq.Option{asynq.Queue(iq), asynq.Retention(time.Minute)}
			task := NewTask(mwTaskType, []byte(fmt.Sprint("person", i)), s)
			if i%2 == 1 { // the class by NewTask's option, on the queue of the sweep
				task, opts = NewTask(mwTaskType, []byte(fmt.Sprint("person", i)), s, Interactive), []asynq.Option{asynq.Queue(e.queue), asynq.Retention(time.Minute)}
			}
			info, err := e.client.Enqueue(task, opts...)
			if err != nil {
				t.Fatal(err)
			}
			iids = append(iids, info.Queue+"/"+info.ID)
		}
		e.waitFor("every task done", func() bool {
			mu.Lock()
			defer mu.Unlock()
			if testing.Verbose() {
				t.Logf("done: %v", admitted)
			}
			return admitted[Background] == sweep && admitted[Interactive] == person
		})
		for _, id := range ids {
			if ti := e.info(id); ti.Retried != 0 {
				t.Errorf("sweep task %s retried %d times: a deferral spent a retry", id, ti.Retried)
			}
		}
		for _, qid := range iids {
			q, id, _ := strings.Cut(qid, "/")
			ti, err := e.insp.GetTaskInfo(q, id)
			if err != nil || ti.Retried != 0 {
				t.Errorf("interactive task %s: %v, retried %v", qid, err, ti)
			}
		}
		if waited := histCount(t, g, "quotagate_wait_seconds", map[string]string{"class": "background"}); waited == 0 {
			t.Error("no background poll waited: the sweep did not saturate the bucket, the test measures nothing")
		}
		if got := countOf(t, g, "quotagate_admissions_total", map[string]string{"class": "interactive", "outcome": "admitted"}); got != person {
			t.Errorf("interactive admissions counted %d, want %d", got, person)
		}
	})
}

// series returns the gate's series of the metric name whose labels
// include match.
func series(t *testing.T, g *Gate, name string, match map[string]string) []*dto.Metric {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(g.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []*dto.Metric
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelsMatch(m, match) {
				out = append(out, m)
			}
		}
	}
	return out
}

// countOf sums the counters of series(name, match).
func countOf(t *testing.T, g *Gate, name string, match map[string]string) int {
	n := 0.0
	for _, m := range series(t, g, name, match) {
		n += m.GetCounter().GetValue()
	}
	return int(n)
}

// histCount is the number of observations of the histograms of
// series(name, match).
func histCount(t *testing.T, g *Gate, name string, match map[string]string) int {
	n := uint64(0)
	for _, m := range series(t, g, name, match) {
		n += m.GetHistogram().GetSampleCount()
	}
	return int(n)
}

func labelsMatch(m *dto.Metric, want map[string]string) bool {
	got := map[string]string{}
	for _, l := range m.GetLabel() {
		got[l.GetName()] = l.GetValue()
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// TestKeepsWorker is keepsWorker's rule: only background work behind a
// configured limit, in a gate that expects interactive work, leaves a
// worker free.
func TestKeepsWorker(t *testing.T) {
	limited := []Limit{FixedWindow(10, time.Second)}
	for _, c := range []struct {
		expect bool
		class  Class
		ls     []Limit
		want   bool
	}{
		{true, Background, limited, true},
		{true, Interactive, limited, false},
		{true, Background, nil, false},
		{false, Background, limited, false},
	} {
		g := &Gate{expect: c.expect}
		if got := g.keepsWorker(c.class, c.ls); got != c.want {
			t.Errorf("expect %v, %v, %d limits: %v, want %v", c.expect, c.class, len(c.ls), got, c.want)
		}
	}
}
