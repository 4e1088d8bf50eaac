package store

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/model"
)

// TestAnswersRideTheNextAdmission: a slow start's answers kept with
// ObserveLater cost no round trip of their own. The scope's next
// admission carries them in its pipeline, before it, so it finds the room
// they made; answers no admission carries go within answerFlush, in one
// call. On every backend (a Cluster routes the pipeline to the scope's
// node).
func TestAnswersRideTheNextAdmission(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := b.Open(t)
			ctx := context.Background()
			var mu sync.Mutex
			trips := map[string]int{}
			st := New(Config{Client: e.Rdb, Prefix: e.Prefix, Timeout: 30 * time.Second, MaxPause: 12 * time.Hour,
				Hooks: Hooks{RoundTrip: func(_ context.Context, op string, _ time.Time, _ error) { mu.Lock(); trips[op]++; mu.Unlock() }}})
			count := func(op string) int { mu.Lock(); defer mu.Unlock(); return trips[op] }
			k := scopeKeys(e.Prefix, "silent")
			admit := func() Admission {
				t.Helper()
				r := admitRequest(1, 2*time.Second)
				r.Probe = time.Minute
				a, err := st.Admit(ctx, k, r)
				if err != nil {
					t.Fatal(err)
				}
				return a
			}
			// The first contact's probe, answered with no budget: the scope
			// starts slowly, startFirst requests before the next answer.
			p := admit()
			if !p.Probe {
				t.Fatalf("first admission %+v: want a probe", p.Decision)
			}
			if err := st.Observe(ctx, k, model.Observation{Remaining: -1, Opened: p.Opens}); err != nil {
				t.Fatal(err)
			}
			var sent []Admission
			for {
				a := admit()
				if a.Code != model.Admitted {
					if a.Reason != model.ReasonInFlight {
						t.Fatalf("after %d admissions: %+v; want limited in flight (the slow start's room)", len(sent), a.Decision)
					}
					break
				}
				if a.Opens == 0 {
					t.Fatalf("admission %d of the slow start has no answer id: %+v", len(sent), a.Decision)
				}
				sent = append(sent, a)
			}
			// An answer kept: no round trip; the next admission carries it
			// and is admitted, in one round trip.
			admits, observes := count("admit"), count("observe")
			st.ObserveLater(k, model.Observation{Remaining: -1, Opened: sent[0].Opens})
			if got := count("observe"); got != observes {
				t.Fatalf("ObserveLater made %d round trips; want none", got-observes)
			}
			if a := admit(); a.Code != model.Admitted {
				t.Fatalf("admission after an answer kept: %+v; want admitted (the answer carried first)", a.Decision)
			}
			if got := count("admit") - admits; got != 1 || count("observe") != observes {
				t.Fatalf("the admission that carried the answer: %d admit and %d observe round trips; want 1 and 0",
					got, count("observe")-observes)
			}
			// An answer no admission carries goes by itself within answerFlush.
			st.ObserveLater(k, model.Observation{Remaining: -1, Opened: sent[1].Opens})
			eventually(t, 5*time.Second, "the answer flushed", func() bool { return count("observe") == observes+1 })
			if a := admit(); a.Code != model.Admitted {
				t.Fatalf("admission after an answer flushed: %+v; want admitted", a.Decision)
			}
		})
	}
}

// TestAnswersAfterScriptFlush: a pipeline sends its scripts by their SHA;
// a node that lost them (restarted, failed over, SCRIPT FLUSH) answers
// NOSCRIPT, and each script it did not run runs again with its source:
// the kept answer and the admission both take effect.
func TestAnswersAfterScriptFlush(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := b.Open(t)
			ctx := context.Background()
			st := testStore(e.Rdb, e.Prefix)
			k := scopeKeys(e.Prefix, "flushed")
			r := admitRequest(1, 2*time.Second)
			r.Probe = time.Minute
			p, err := st.Admit(ctx, k, r)
			if err != nil || !p.Probe {
				t.Fatalf("first admission %+v, %v: want a probe", p.Decision, err)
			}
			if err := e.Rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			// The probe's answer, kept, then an admission: both scripts are
			// unknown to the node. With the answer applied the scope is in
			// its slow start and admits; without it, the probe unanswered
			// holds it (the first contact's peers wait).
			st.ObserveLater(k, model.Observation{Remaining: -1, Opened: p.Opens})
			a, err := st.Admit(ctx, k, r)
			if err != nil || a.Code != model.Admitted {
				t.Fatalf("admission after SCRIPT FLUSH = %+v, %v; want admitted (the answer ran first)", a.Decision, err)
			}
		})
	}
}
