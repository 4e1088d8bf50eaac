package store

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/model"
	"github.com/quotagate/quotagate/internal/schema"
)

// Answers: an observation that carries nothing but an answer (a response
// that advertised no budget, answering a slow start's admission, a
// learned window's or a hintless episode's probe: model.Observation with
// Opened set and no Remaining) costs no round trip of its own. The store
// keeps it, per scope, and sends it in the same pipeline as the scope's
// next admission, before it, so the admission reads the state the answer
// made (its slow start's room, its window opened): a worker woken in the
// process by the answer (local.SlotWakers) carries it. Answers no
// admission carried within answerFlush go together, one pipeline for
// every scope, so the peers in other processes, which look every
// concurrentPoll, hear them no later than that.
//
// A refusal of the scope sends its answers first (they came before it);
// a Resume drops them (the scope forgets what they would teach). An answer
// lost with a failed pipeline is as an observation lost with a failed
// call: the slow start waits for its answer timeout, the window for its
// probe's.

// answerFlush is how long an answer waits for its scope's next admission
// before it is sent with the others: the model's concurrentPoll (20 ms),
// the period at which waiting peers in other processes look again, so a
// peer that waits for the answer's room hears it within two looks. A
// worker of this process that waits for it is woken here and carries it
// (local.SlotWakers), so the flush serves only the other processes; one
// flush per period is what a fleet of rarely-seen scopes pays above one
// round trip per request (BenchmarkRedisCPU/silent-transport).
const answerFlush = 20 * time.Millisecond

// answer is a call kept for its scope's next round trip: an observation
// (ObserveLater), or a report of admissions no script counted
// (ReportLater).
type answer struct {
	script *redis.Script
	keys   []string
	args   []any
}

// answers are the answers kept, per pause key, and the flush to come.
type answers struct {
	kept    atomic.Int64 // answers kept: an admission takes the lock only when some are
	mu      sync.Mutex
	pending map[string][]answer
	timer   *time.Timer // the flush to come; nil when nothing is kept
}

// ObserveLater keeps o, an observation of the scope of k that carries
// nothing but an answer (no budget advertised), for the scope's next
// admission or the flush within answerFlush (see Answers above).
func (s *Store) ObserveLater(k schema.Keys, o model.Observation, ls ...model.LimitSpec) {
	ks, args := model.ObserveCall(k, o, ls)
	s.answers.keep(s, k.Pause, answer{model.ObserveScript, ks, args})
}

// ReportLater keeps a report of n admissions of the scope of k that no
// script counted (model.ReportScript), the first of them age before now,
// for the scope's next admission or the flush within answerFlush, as an
// answer.
func (s *Store) ReportLater(k schema.Keys, n int64, age time.Duration) {
	if n <= 0 {
		return
	}
	ks, args := model.ReportCall(k, n, age.Microseconds())
	s.answers.keep(s, k.Pause, answer{model.ReportScript, ks, args})
}

// keep keeps c for the scope of pause key k, and sets the flush.
func (a *answers) keep(s *Store, k string, c answer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pending == nil {
		a.pending = make(map[string][]answer)
	}
	a.pending[k] = append(a.pending[k], c)
	a.kept.Add(1)
	if a.timer == nil {
		a.timer = time.AfterFunc(answerFlush, func() { s.FlushAnswers(context.Background()) })
	}
}

// take removes and returns the answers kept for the scope of pause key k.
func (a *answers) take(k string) []answer {
	if a.kept.Load() == 0 {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.pending[k]
	delete(a.pending, k)
	a.kept.Add(-int64(len(out)))
	return out
}

// takeAll removes and returns every answer kept.
func (a *answers) takeAll() map[string][]answer {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.pending
	a.pending, a.timer = nil, nil
	a.kept.Store(0)
	return out
}

// FlushAnswers sends every answer kept, in one pipeline (one round trip
// per node of a Cluster). Answers a failed pipeline carried are lost.
func (s *Store) FlushAnswers(ctx context.Context) {
	all := s.answers.takeAll()
	if len(all) == 0 {
		return
	}
	var b batch
	for _, as := range all {
		b.answers(as)
	}
	s.sendBatch(ctx, &b)
}

// sendAnswers sends the answers as in one pipeline.
func (s *Store) sendAnswers(ctx context.Context, as []answer) {
	var b batch
	b.answers(as)
	s.sendBatch(ctx, &b)
}

// sendBatch runs b as the store's "observe" call (Hooks.RoundTrip).
func (s *Store) sendBatch(ctx context.Context, b *batch) {
	_, _ = bounded(ctx, s, "observe", func(ctx context.Context) (any, error) { return nil, b.send(ctx, s.rdb) })
}

// admitAfter runs the admission (model.AdmitScript of keys and args)
// after the answers as, in one pipeline, and returns its reply.
func (s *Store) admitAfter(ctx context.Context, as []answer, keys []string, args []any) (map[string]int64, error) {
	v, err := bounded(ctx, s, "admit", func(ctx context.Context) (any, error) {
		var b batch
		b.answers(as)
		last := b.add(model.AdmitScript, keys, args)
		_ = b.send(ctx, s.rdb) // an answer lost fails nothing: the admission's own reply tells
		return b.calls[last].cmd.Result()
	})
	if err != nil {
		return nil, err
	}
	m, _, err := model.NamedReply(v, model.AdmitReply)
	return m, err
}

// batch is scripts sent in one pipeline.
type batch struct{ calls []call }

// call is one script of a batch and, once run, its reply.
type call struct {
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
}

// add adds a call of script and returns its index.
func (b *batch) add(script *redis.Script, keys []string, args []any) int {
	b.calls = append(b.calls, call{script: script, keys: keys, args: args})
	return len(b.calls) - 1
}

// answers adds the calls of as.
func (b *batch) answers(as []answer) {
	for _, a := range as {
		b.add(a.script, a.keys, a.args)
	}
}

// send sends the batch in one pipeline (EVALSHA). A script the node did not
// have cached (NOSCRIPT: it restarted, failed over or flushed its scripts)
// did not run: it runs again, alone, with its source if need be
// (Script.Run). Each call's reply is then its cmd's; send returns the
// first call's error, if any.
func (b *batch) send(ctx context.Context, rdb redis.UniversalClient) error {
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range b.calls {
			c := &b.calls[i]
			c.cmd = c.script.EvalSha(ctx, p, c.keys, c.args...)
		}
		return nil
	})
	var first error
	for i := range b.calls {
		c := &b.calls[i]
		if redis.HasErrorPrefix(c.cmd.Err(), "NOSCRIPT") {
			c.cmd = c.script.Run(ctx, rdb, c.keys, c.args...)
		}
		if err := c.cmd.Err(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
