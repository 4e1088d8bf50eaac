package model

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/schema"

	"github.com/redis/go-redis/v9"
)

// The differential test: random sequences of events (admissions with
// costs, refusals with and without hints, budget observations, resumes,
// time passing) run through the Go model (model.go) and through the
// scripts (scripts.go) on the same scope, and the two must give the same
// verdicts and leave the same state after every event.

// diffConfigs are the limit configurations a sequence runs under: none
// (the budget and the learned limit apply), one GCRA, one fixed window,
// both stacked.
var diffConfigs = [][]Limit{
	nil,
	{PerSecond(10, 3)},
	{FixedWindow(3, time.Second)},
	{PerSecond(20, 5), FixedWindow(4, 2*time.Second)},
	{SlidingWindow(3, time.Second)},
	{SlidingWindow(4, 2*time.Second), PerSecond(20, 5), FixedWindow(5, time.Second)},
	{diffLeased(Concurrent(2))},
	{PerSecond(10, 3), diffLeased(Concurrent(4)), SlidingWindow(4, time.Second)},
}

// diffLeased is l with leases of 2 s: the sequences see them expire.
func diffLeased(l Limit) Limit { l.Period = 2 * time.Second; return l }

// diffEvent is one event of a sequence.
type diffEvent struct {
	kind     byte // 'a' admit, 'r' refuse, 'o' observe, 'z' resume, 't' time, 'l' release
	lease    int  // release: which lease held (by its order), or one never held when beyond them; refuse: which admission it refuses, from the last (its level and answer id), none when beyond them
	answered bool // release: its request was not refused
	cost     int64
	nowOnly  bool // admit: reserve no slot ahead (Params.NowOnly)
	expect   bool // admit: interactive work is expected (Params.Expect)
	retry    bool // admit: with the last admission's lease id, as a call retried after its answer was lost (admission.retried)
	class    Class
	counts   int64 // admissions no script counted, reported first
	age      int64 // µs: how long before the event the first of them was admitted
	pause    int64 // ms
	hinted   bool
	operator bool
	prec     int64 // µs
	alt      int64 // refuse: the hint read as milliseconds (Refusal.Alt), ms
	obs      Observation
	advance  time.Duration
}

func (e diffEvent) String() string {
	switch e.kind {
	case 'a':
		return fmt.Sprintf("admit(cost %d %s now-only %v expect %v retry %v)", e.cost, e.class, e.nowOnly, e.expect, e.retry)
	case 'r':
		return fmt.Sprintf("refuse(%dms hinted %v prec %dµs alt %dms of %d)", e.pause, e.hinted, e.prec, e.alt, e.lease)
	case 'o':
		return fmt.Sprintf("observe(%+v)", e.obs)
	case 'z':
		return "resume"
	case 'l':
		return fmt.Sprintf("release(%d answered %v)", e.lease, e.answered)
	}
	return "advance " + e.advance.String()
}

// diffEvents draws n events from r; silent: the provider advertises no
// budget (the learned limit's case).
func diffEvents(r *rand.Rand, n int, real, silent bool) []diffEvent {
	evs := make([]diffEvent, 0, n)
	hintMs := int64(1000 + r.IntN(3)*1000)
	// u draws what a reset's unit adds (milliseconds under a name of
	// seconds) apart from r, seeded by one draw of r: drawn from r, they
	// changed the sequences enough that none reached "resets rounded down"
	// or "slow start answered" any more
	u := rand.New(rand.NewPCG(r.Uint64(), 31))
	for range n {
		var e diffEvent
		x := r.IntN(100)
		if silent && x >= 55 && x < 68 {
			x = 40 // a silent provider: more admissions, fewer observations
		}
		switch {
		case x < 45:
			e = diffEvent{kind: 'a', cost: 1 + int64(r.IntN(10)/8), counts: int64(max(r.IntN(10)-6, 0)), class: classes[min(r.IntN(4), 1)]}
			e.retry = len(evs)%7 == 3 // no draw of r: the paths stay
		case x < 55:
			e = diffEvent{kind: 'r', pause: 1000 + int64(r.IntN(4000)), hinted: r.IntN(3) > 0, prec: []int64{1000, 1_000_000}[r.IntN(2)],
				counts: int64(max(r.IntN(10)-6, 0))}
			if silent && r.IntN(2) == 0 { // a window's reset, as such a provider hints it
				e.pause, e.hinted, e.prec = hintMs, true, 1_000_000
			}
			if !e.hinted && r.IntN(3) == 0 {
				e.operator = true // Gate.Pause
			}
			if e.hinted && u.IntN(3) == 0 { // a reset that may be milliseconds
				e.alt = MinPause.Milliseconds() + int64(u.IntN(3000))
			}
			e.lease = u.IntN(4) // the admission it refuses, from the last
		case x < 70:
			o := Observation{Remaining: int64(r.IntN(7)) - 1, Limit: []int64{0, 5}[r.IntN(2)], Prec: []int64{1000, 1_000_000}[r.IntN(2)], Seq: int64(r.IntN(8))}
			if silent {
				o = Observation{Remaining: -1 - int64(r.IntN(2))}
			}
			if r.IntN(2) == 0 {
				o.Opened = -1 // the learned window's probe in force, if any (see diffRun)
			}
			if !silent && o.Seq == 7 {
				// the last admission's answer, its reset farther than the
				// last reading's (see diffRun): a bucket telling when it is
				// full, read in order
				o.Seq, o.Reset = -1, -1
			}
			if r.IntN(3) > 0 {
				o.Reset = int64(1 + r.IntN(3_000_000))
			}
			switch u.IntN(8) {
			case 0: // a whole number of seconds that may be milliseconds: of the window in force, if any (see diffRun)
				o.Alt, o.Prec = -1, 1_000_000
			case 1: // read as milliseconds from a name of seconds
				o.Millis = true
			}
			o.Refused = r.IntN(4) == 0 // a refusal's own headers (budget left: learnState.secondary)
			o.RTT = o.Seq * 7_000      // the answered request's round trip, sometimes beyond the reset's precision
			e = diffEvent{kind: 'o', obs: o}
		case x < 72:
			e = diffEvent{kind: 'z'}
		case x < 80:
			e = diffEvent{kind: 'l', lease: r.IntN(3), answered: u.IntN(3) > 0}
		default:
			d := time.Duration(r.IntN(1500)) * time.Millisecond
			if !real && r.IntN(40) == 0 {
				d = 11 * time.Minute // past every record's life
			}
			if real {
				d = time.Duration(r.IntN(30)) * time.Millisecond
			}
			e = diffEvent{kind: 't', advance: d}
		}
		e.age = e.counts * countsAge // no draw of r: the paths stay
		evs = append(evs, e)
	}
	return evs
}

// countsAge is how long before its event the first of its uncounted
// admissions was, per admission: long enough that some begin a first
// cycle before the last refusal's deadline, some after.
const countsAge = 400_000 // µs

// diffRun runs evs under limits ls through the model and the scripts of a
// store on rdb (clock: miniredis's, nil on a real server) and fails t at
// the first difference. It returns the number of events run.
func diffRun(t testing.TB, rdb redis.UniversalClient, clock *miniClock, prefix string, ls []Limit, probe time.Duration, evs []diffEvent, seen map[string]int) int {
	ctx := context.Background()
	k := schema.ScopeKeys(prefix, "diff", "a")
	p := Params{Hold: (250 * time.Millisecond).Microseconds(), MaxPause: time.Hour.Milliseconds(), Probe: probe.Microseconds(),
		Answer: diffAnswer.Microseconds(), Reserve: diffReserve, Lend: diffLend.Microseconds()}
	for _, l := range ls {
		p.Limits = append(p.Limits, specOf(l))
	}
	var m State
	m.Normalize(p, 0)
	opens := int64(0)                // the last admission's answer id
	var admitted []Decision          // the admissions, for their refusals' levels and answer ids
	lastID, lastCost := "", int64(0) // the last admission's lease id and cost
	for i, e := range evs {
		var now int64
		switch e.kind {
		case 'a':
			id := ""
			if concurrentIn(ls) || len(ls) == 0 { // a learned concurrency limit may lease
				id = "L" + strconv.Itoa(i)
				if e.retry && lastID != "" { // the same call: its id and cost
					id, e.cost = lastID, lastCost
				}
				lastID, lastCost = id, e.cost
			}
			e.nowOnly = e.nowOnly || i%9 == 4             // every ninth event: no slot ahead (no draw of r: the paths stay)
			e.expect = e.expect || i%7 == 3               // every seventh: interactive work expected
			if i%5 == 2 && e.counts > 0 && len(ls) == 0 { // the counts reported apart (ReportScript), then the admission
				ks, args := ReportCall(k, e.counts, e.age)
				v, _ := diffCall(t, rdb, ReportScript, ReportReply, ks, args, i, e)
				before := m.learn
				m.Report(p, v["now"], e.counts, e.age)
				if m.learn != before {
					seen["counts reported apart"]++
				}
				e.counts = 0
			}
			ks, args := AdmitRequest{Limits: specsOf(ls), Cost: e.cost, Hold: p.Hold, MaxPause: p.MaxPause, Probe: p.Probe, NowOnly: e.nowOnly,
				Answer: p.Answer, Counts: e.counts, Age: e.age, Class: e.class, Reserve: p.Reserve, Lend: p.Lend, Lease: id, Expect: e.expect}.Call(k)
			v, _ := diffCall(t, rdb, AdmitScript, AdmitReply, ks, args, i, e)
			var got Decision
			got, now = AdmitDecision(v)
			if m.learn.since == 0 && m.learn.limit == 0 && e.counts > 0 && len(ls) == 0 {
				seen["counts begin the first cycle"]++
			}
			m.Report(p, now, e.counts, e.age)
			pe := p
			pe.NowOnly, pe.Expect = e.nowOnly, e.expect
			kp := m.class.keeper(pe, now, e.class == Interactive)
			probing := m.budget.probeAt > 0 && now < m.budget.probeAt+p.Probe && len(ls) == 0
			d := m.AdmitLease(pe, now, e.cost, e.class, id)
			if probing && e.nowOnly && d.Code == Admitted {
				seen["now-only beside a probe"]++
			}
			if got != d {
				t.Fatalf("event %d %v at %d:\nscript %+v\nmodel  %+v\nhistory %v", i, e, now, got, d, evs[:i+1])
			}
			seen[fmt.Sprintf("code %d reason %d", d.Code, d.Reason)]++
			if kp.holds() {
				seen[fmt.Sprintf("kept: code %d reason %d", d.Code, d.Reason)]++
			}
			if kp.lent > 0 && len(ls) > 0 {
				seen[fmt.Sprintf("lent: code %d", d.Code)]++
				if m.class.seen == 0 {
					seen["lent, expected"]++
				}
			}
			if d.Probe {
				seen["probe"]++
			}
			if m.budget.per > 0 && d.Code == Admitted && len(ls) == 0 {
				seen["budget refilled: admitted"]++
			}
			if m.budget.window > 0 && m.budget.refilled == m.budget.seq-e.cost && d.Code == Admitted && !d.Probe {
				seen["counter rolled: admitted"]++
			}
			if slidingIn(ls) {
				seen[fmt.Sprintf("sliding: code %d", d.Code)]++
			}
			if concurrentIn(ls) {
				seen[fmt.Sprintf("concurrent: code %d reason %d", d.Code, d.Reason)]++
			}
			if d.Opens > 0 {
				seen["opens"]++
				opens = d.Opens
			}
			if d.Code == Admitted {
				admitted = append(admitted, d)
			}
			flightPaths(seen, m, d)
			if d.Reason == ReasonInFlight && !concurrentIn(ls) {
				seen["slow start holds"]++
			}
			if m.start.over && m.start.answered > 0 {
				seen["slow start over"]++
			}
			if d.Opens > 0 && d.Opens == m.fall.probeAt {
				seen["hintless probe"]++
			}
			if l, ok := m.learn.spec(); ok {
				seen[fmt.Sprintf("learned limit %d", min(l.n, 3))]++
			}
			if d.Code == Admitted && m.learn.frozen > now {
				seen["raises frozen"]++
			}
			if d.Reason == ReasonLearned && m.budget.known {
				seen["learned beside a budget"]++
			}
		case 'r':
			var of Decision // the refused admission
			if e.lease < len(admitted) {
				of = admitted[len(admitted)-1-e.lease]
			}
			ks, args := refuseCall(k, ls, e, of)
			v, _ := diffCall(t, rdb, RefuseScript, RefuseReply, ks, args, i, e)
			now = v["now"]
			m.Report(p, now, e.counts, e.age)
			before, probed, w := slidingLen(m), m.learn.probeAt > 0, m.learn.window
			at := m.learn.probeAt
			probeIn := probed && slices.Contains(m.llog.log, at)
			millis := e.alt > 0 && m.budget.millis
			phase := m.flight.phase
			deadline, moved := m.Refuse(p, now, Refusal{Pause: e.pause, Hinted: e.hinted, Prec: e.prec, Operator: e.operator, Alt: e.alt,
				Level: of.Level, Mark: of.Mark, Opens: of.Opens})
			own := deadline != m.Deadline()
			if (v["own"] == flagOn) != own {
				t.Fatalf("event %d %v: script own %d, model %v; history %v", i, e, v["own"], own, evs[:i+1])
			}
			if own {
				seen["flight: a refusal of the limit"]++
			}
			if phase != m.flight.phase {
				seen[fmt.Sprintf("flight: refused %d to %d", phase, m.flight.phase)]++
			}
			if millis && e.hinted {
				seen["refusal read in milliseconds"]++
			}
			if probed && m.learn.window != w && m.learn.window > 0 {
				seen["refused probe relearned"]++
			}
			if probeIn && m.learn.window == w && !slices.Contains(m.llog.log, at) {
				seen["refused probe left the learned log"]++
			}
			if slidingLen(m) > before {
				seen["sliding filled"]++
			}
			if m.learn.frozen > now {
				seen["refused: raises frozen"]++
			}
			if m.fall.level > fallbackFirst {
				seen["hintless pause grown"]++
			}
			if e.hinted && deadline < floorDiv(now, 1000)+e.pause {
				seen["counter's hint shortened"]++
			}
			if v["deadline"] != deadline || (v["moved"] == 1) != moved {
				t.Fatalf("event %d %v: script deadline %d moved %d, model %d %v; history %v", i, e, v["deadline"], v["moved"], deadline, moved, evs[:i+1])
			}
		case 'o':
			if e.obs.Opened == -1 {
				e.obs.Opened = m.learn.probeAt // or a hintless episode's probe
				if e.obs.Opened == 0 {
					e.obs.Opened = m.fall.probeAt
				}
				if e.obs.Opened == 0 {
					e.obs.Opened = opens // a slow start's admission
				}
			}
			if e.obs.Seq == -1 {
				e.obs.Seq, e.obs.Reset = m.budget.seq, m.budget.dist+e.obs.Prec
			}
			if e.obs.Alt == -1 { // N seconds, N ms the reset in force (if any)
				n := 1 + (e.obs.Seq*389)%3000 // ms
				if m.budget.reset > now && now > 0 {
					n = max((m.budget.reset-now)/1000, 1)
				}
				e.obs.Alt, e.obs.Reset = n*1000, n*1_000_000
			}
			if e.obs.Opened > 0 && e.obs.Opened == m.fall.probeAt {
				seen["hintless probe answered"]++
			}
			ks, args := ObserveCall(k, e.obs, specsOf(ls))
			v, _ := diffCall(t, rdb, ObserveScript, ObserveReply, ks, args, i, e)
			now = v["now"]
			if w := longestFixed(specsOf(ls)); w > 0 && e.obs.Remaining >= 0 && e.obs.Reset > w+e.obs.Prec {
				seen["reset beyond the windows"]++
			}
			down, answered, millis := m.budget.down, m.start.answered, m.budget.millis
			pre := State{budget: m.budget}
			pre.normalizeBudget(now)
			m.Observe(p, now, e.obs)
			readingPaths(seen, pre.budget, m.budget, now, e.obs)
			if m.budget.millis && !millis && !e.obs.Millis {
				seen["resets read in milliseconds"]++
			}
			if m.start.answered > answered {
				seen["slow start answered"]++
			}
			if m.budget.window > 0 {
				seen["budget counts"]++
			}
			if m.budget.down && !down {
				seen["resets rounded down"]++
			}
			if m.budget.per > 0 {
				seen["budget refills"]++
				if len(ls) == 0 {
					seen["budget refills, enforced"]++
				}
			}
		case 'l':
			held := diffLeases(m)
			x := lease{id: "never", cost: 1}
			if e.lease < len(held) {
				x = held[e.lease]
			}
			n := int64(0)
			limit := m.flight.limit
			if ks, args := ReleaseCall(k, specsOf(ls), x.id, x.cost, e.answered); len(ks) > 0 {
				var err error
				if n, err = ReleaseScript.Run(ctx, rdb, ks, args...).Int64(); err != nil {
					t.Fatalf("event %d %v: %v", i, e, err)
				}
			}
			if n > 0 {
				seen["released"]++
			}
			now = diffNow(t, rdb)
			m.Release(p, now, x.id, e.answered)
			if m.flight.limit > limit {
				seen["flight: raised"]++
			}
		case 'z':
			ks, args := ResumeCall(k, p.MaxPause)
			if err := ResumeScript.Run(ctx, rdb, ks, args...).Err(); err != nil {
				t.Fatal(err)
			}
			m.Resume(p)
			continue
		case 't':
			if clock != nil {
				clock.Advance(e.advance)
			} else {
				time.Sleep(e.advance)
			}
			continue
		}
		m.Normalize(p, now)
		got := loadScope(t, rdb, k, ls, p, now)
		if w, g := canonical(m), canonical(got); !reflect.DeepEqual(w, g) {
			t.Fatalf("event %d %v at %d: state differs\nscript %+v\nmodel  %+v\nhistory %v", i, e, now, g, w, evs[:i+1])
		}
	}
	return len(evs)
}

// readingPaths counts in seen the budget's rule an observation o at now
// took that only its outcome tells apart, pre the budget normalized at now
// before it and post after: a reading of the window in force earlier than
// its reset where resets are written rounded down, which keeps the
// window's first reset (keptReset).
func readingPaths(seen map[string]int, pre, post budgetState, now int64, o Observation) {
	if o.Remaining < 0 || o.Reset <= 0 || o.Alt > 0 {
		return
	}
	u := now + o.Reset
	same := pre.sameWindow(now, u, o.Prec)
	if same && post.down && u < pre.reset && post.reset == pre.reset {
		seen["rounded down: first reset kept"]++
	}
}

// The reserve and lending delay of the differential test: a large share,
// so that the small limits of diffConfigs keep some of it.
const (
	diffReserve = 400 // per mille
	diffLend    = 2 * time.Second
)

// diffAnswer is the learned window's probe's timeout the differential
// test runs with: the gate's (MaxHold and one asynq tick).
const diffAnswer = 1250 * time.Millisecond

// diffCall runs script with ks and args and decodes its named reply, or
// fails the test at event i.
func diffCall(t testing.TB, rdb redis.UniversalClient, script *redis.Script, names, ks []string, args []any, i int, e diffEvent) (map[string]int64, map[string]string) {
	t.Helper()
	raw, err := script.Run(context.Background(), rdb, ks, args...).Result()
	if err != nil {
		t.Fatalf("event %d %v: %v", i, e, err)
	}
	v, txt, err := NamedReply(raw, names)
	if err != nil {
		t.Fatalf("event %d %v: %v", i, e, err)
	}
	return v, txt
}

// refuseCall is the refusal of event e of the admission of, as the gate
// records it.
func refuseCall(k schema.Keys, ls []Limit, e diffEvent, of Decision) ([]string, []any) {
	kind := Hintless
	if e.hinted {
		kind = Hinted
	}
	if e.operator {
		kind = Operator
	}
	return RefuseRequest{Limits: specsOf(ls), Pause: e.pause, MaxPause: time.Hour.Milliseconds(), Kind: kind, Prec: e.prec,
		Counts: e.counts, Age: e.age, Alt: e.alt, Level: of.Level, Mark: of.Mark, Opens: of.Opens}.Call(k)
}

// loadScope reads the scope's records from Redis into the model's state,
// as the scripts read them: the loader the differential test compares
// with, written apart from the Lua.
func loadScope(t testing.TB, rdb redis.UniversalClient, k schema.Keys, ls []Limit, p Params, now int64) State {
	ctx := context.Background()
	num := func(v string) int64 { n, _ := strconv.ParseInt(v, 10, 64); return n }
	hash := func(key string) map[string]string {
		h, err := rdb.HGetAll(ctx, key).Result()
		if err != nil {
			t.Fatalf("HGETALL %s: %v", key, err)
		}
		return h
	}
	get := func(key string) int64 { v, _ := rdb.Get(ctx, key).Result(); return num(v) }
	windows := func(key string) *windowState {
		w := &windowState{counts: map[int64]int64{}}
		for f, v := range hash(key) {
			if f == schema.FieldOrigin {
				w.origin = num(v)
			} else {
				w.counts[num(f)] = num(v)
			}
		}
		return w
	}
	zlog := func(key string) []int64 { // a sliding log's instants, in order
		members, err := rdb.ZRange(ctx, key, 0, -1).Result()
		if err != nil {
			t.Fatalf("ZRANGE %s: %v", key, err)
		}
		var log []int64
		for _, m := range members {
			at, _, _ := strings.Cut(m, ":")
			log = append(log, num(at))
		}
		slices.Sort(log)
		return log
	}
	zleases := func(key string) []lease { // a concurrency limit's leases, in order
		zs, err := rdb.ZRangeWithScores(ctx, key, 0, -1).Result()
		if err != nil {
			t.Fatalf("ZRANGE %s: %v", key, err)
		}
		var ls []lease
		for _, z := range zs {
			c, id, _ := strings.Cut(z.Member.(string), ":")
			ls = append(ls, lease{exp: int64(z.Score), id: id, cost: num(c)})
		}
		slices.SortFunc(ls, compareLeases)
		return ls
	}
	var s State
	s.pause.untilMs = get(k.Pause)
	by, _ := rdb.Get(ctx, k.PauseBy).Result()
	s.pause.operator = by == "operator"
	s.line.next = get(k.Line)
	s.iline.next = get(k.ILine)
	c := hash(k.Class)
	s.class = classState{seen: num(c["seen"]), claims: num(c["claims"]), claimed: num(c["claimed"])}
	for i, l := range ls {
		if l.Fixed {
			s.limits = append(s.limits, limitState{fixed: true, win: windows(limitKey(k, i, l))})
		} else if l.Sliding {
			s.limits = append(s.limits, limitState{sliding: true, log: zlog(limitKey(k, i, l)), win: &windowState{}})
		} else if l.Concurrent {
			s.limits = append(s.limits, limitState{concurrent: true, leases: zleases(limitKey(k, i, l)), win: &windowState{}})
		} else {
			s.limits = append(s.limits, limitState{tat: get(limitKey(k, i, l)), win: &windowState{}})
		}
	}
	b := hash(k.Budget)
	_, known := b["remaining"]
	s.budget = budgetState{known: known, remaining: num(b["remaining"]), reset: num(b["reset"]), limit: num(b["limit"]),
		seq: num(b["seq"]), refilled: num(b["refilled"]), probeAt: num(b["probeAt"]), silent: b["silent"] == "1", expires: num(b["expires"]),
		per: num(b["per"]), at: num(b["at"]), dist: num(b["dist"]), distSeq: num(b["distSeq"]),
		window: num(b["window"]), first: num(b["first"]), held: b["held"] == "1", down: b["down"] == "1", answered: num(b["answered"]),
		millis: b["millis"] == "1"}
	l := hash(k.Learn)
	s.learn = learnState{limit: num(l["limit"]), window: num(l["window"]), best: num(l["best"]), since: num(l["since"]),
		admits: num(l["admits"]), alignAt: num(l["alignAt"]), alignPrec: num(l["alignPrec"]), absorb: num(l["absorb"]),
		refused: num(l["refused"]), probeAt: num(l["probeAt"]), frozen: num(l["frozen"]), secondary: num(l["secondary"]), paced: num(l["paced"]), expires: num(l["expires"])}
	s.lwin = *windows(k.LearnWin)
	s.llog = limitState{sliding: true, log: zlog(k.LearnLog)}
	f := hash(k.Fallback)
	s.fall = fallbackState{level: num(f["level"]), probeAt: num(f["probeAt"]), expires: num(f["expires"])}
	g := hash(k.Start)
	s.start = startState{began: num(g["began"]), last: num(g["last"]), sent: num(g["sent"]), answered: num(g["answered"]),
		run: num(g["run"]), along: num(g["along"]), most: num(g["most"]), over: g["over"] == "1", expires: num(g["expires"])}
	h := hash(k.Flight)
	s.flight = flightState{limit: num(h["limit"]), phase: num(h["phase"]), since: num(h["since"]), sent: num(h["sent"]), acks: num(h["acks"]), answered: num(h["answered"]), before: num(h["before"]),
		last: num(h["last"]), full: h["full"] == "1", frozen: num(h["frozen"]), admitted: num(h["admitted"]), expires: num(h["expires"]), held: num(h["held"]), raised: num(h["raised"]), grown: num(h["grown"])}
	s.lease = limitState{concurrent: true, leases: zleases(k.FlightConc), win: &windowState{}}
	s.Normalize(p, now)
	return s
}

// canonState is State made comparable: pointers followed, empty maps
// and absent ones alike.
type canonState struct {
	Pause, Line, Iline int64
	Class              classState
	Operator           bool
	Limits             []canonLimit
	Budget             budgetState
	Learn              learnState
	Lwin               canonWindows
	Llog               []int64
	Fallback           fallbackState
	Start              startState
	Flight             flightState
	Lease              []lease
}

type canonLimit struct {
	Fixed, Sliding, Concurrent bool
	Tat                        int64
	Win                        canonWindows
	Log                        []int64
	Leases                     []lease
}

type canonWindows struct {
	Origin int64
	Counts map[int64]int64
}

func canonical(s State) canonState {
	win := func(w *windowState) canonWindows {
		if w == nil {
			return canonWindows{}
		}
		c := canonWindows{Origin: w.origin}
		if len(w.counts) > 0 {
			c.Counts = maps.Clone(w.counts)
		}
		return c
	}
	c := canonState{Pause: s.pause.untilMs, Operator: s.pause.operator, Line: s.line.next, Iline: s.iline.next, Class: s.class,
		Budget: s.budget, Learn: s.learn, Lwin: win(&s.lwin), Llog: canonLog(s.llog.log), Fallback: s.fall, Start: s.start,
		Flight: s.flight, Lease: canonLeases(s.lease.leases)}
	for _, l := range s.limits {
		c.Limits = append(c.Limits, canonLimit{Fixed: l.fixed, Sliding: l.sliding, Concurrent: l.concurrent, Tat: l.tat, Win: win(l.win),
			Log: canonLog(l.log), Leases: canonLeases(l.leases)})
	}
	return c
}

// TestDifferential runs random event sequences through the model and the
// scripts, on miniredis (with its clock moved by the sequence, past the
// records' lives too) and on a real redis-server (on its own clock), under
// every configuration of limits, with and without a probe.
func TestDifferential(t *testing.T) {
	for _, b := range backends(t)[:2] {
		t.Run(b.Name, func(t *testing.T) {
			seqs, events := 160, 150 // 20 per configuration: the learned paths need as many as before the concurrent ones
			if b.Name != "miniredis" {
				seqs, events = 12, 80
			}
			total, seen := 0, map[string]int{}
			for i := range seqs {
				e := b.Open(t)
				ls := diffConfigs[i%len(diffConfigs)]
				probe := []time.Duration{0, 2500 * time.Millisecond}[i/len(diffConfigs)%2]
				r := rand.New(rand.NewPCG(uint64(i), 7))
				silent := ls == nil && i/len(diffConfigs)%2 == 0
				total += diffRun(t, e.Rdb, e.Clock, fmt.Sprintf("%s%d", e.Prefix, i), ls, probe, diffEvents(r, events, e.Real(), silent), seen)
			}
			// More of the budget's own case (nothing configured, a provider
			// that advertises it), on a stream of their own: the budget that
			// refills is read there.
			for i := range seqs / 8 {
				e := b.Open(t)
				r := rand.New(rand.NewPCG(uint64(i), 13))
				total += diffRun(t, e.Rdb, e.Clock, fmt.Sprintf("%sb%d", e.Prefix, i), nil, 2500*time.Millisecond, diffEvents(r, events, e.Real(), false), seen)
			}
			t.Logf("%s: %d events in %d sequences: same verdicts and state; paths %v", b.Name, total, seqs+seqs/8, seen)
			if b.Name == "miniredis" {
				// The sequences reach every path the model has: each verdict
				// and reason, probes, and learned limits that grew.
				for _, path := range []string{"code 0 reason 0", "code 1 reason 1", "code 1 reason 2", "code 1 reason 3",
					"code 2 reason 4", "code 2 reason 5", "probe", "opens", "learned limit 1", "learned limit 3", "reset beyond the windows", "learned beside a budget",
					"kept: code 0 reason 0", "kept: code 1 reason 2", "kept: code 2 reason 4", "lent: code 0",
					"sliding: code 0", "sliding: code 1", "sliding: code 2", "sliding filled",
					"concurrent: code 0 reason 0", "concurrent: code 1 reason 1", "concurrent: code 2 reason 6", "concurrent: code 2 reason 4", "released",
					"hintless probe", "hintless probe answered", "hintless pause grown", "budget refills", "resets rounded down",
					"slow start holds", "slow start answered", "resets read in milliseconds", "refusal read in milliseconds",
					"now-only beside a probe", "lent, expected", "counts reported apart", "counts begin the first cycle"} {
					if seen[path] == 0 {
						t.Errorf("no event reached %q", path)
					}
				}
			}
		})
	}
}

// TestDifferentialFrozen runs through model and scripts a sequence that
// freezes the learned limit's raises (raiseAfter) at a refusal of the level
// n, which the random ones seldom reach: a silent provider's 3 admissions
// and a hinted refusal teach 2 per second; a window spent whole at 2 is
// refused at its end (the level never sustained), and the windows spent
// whole after it raise nothing.
func TestDifferentialFrozen(t *testing.T) {
	c, rdb := newMini(t)
	a := diffEvent{kind: 'a', cost: 1, class: Background}
	r := diffEvent{kind: 'r', pause: 1000, hinted: true, prec: 1_000_000}
	tick := func(ms int) diffEvent { return diffEvent{kind: 't', advance: time.Duration(ms) * time.Millisecond} }
	evs := []diffEvent{a, a, a, tick(10), r, tick(1000), a, a, tick(10), r}
	for range 4 { // windows spent whole at 1, each after the other
		evs = append(evs, tick(1000), a, a, tick(5))
	}
	seen := map[string]int{}
	diffRun(t, rdb, c, "qgfrozen", nil, 0, evs, seen)
	if seen["refused: raises frozen"] == 0 || seen["raises frozen"] == 0 {
		t.Errorf("the sequence did not freeze the raises: paths %v", seen)
	}
}

// TestDifferentialLearnedProbe runs through model and scripts the
// sequences in which a learned window's probe is refused, which the random
// ones seldom reach. Each starts with a first contact of 5 refused with "3
// seconds", which teaches 4 per 3 s, and a window spent whole after it;
// then its successor's probe (50 ms into its window: the learned log's
// slot is free then, slidingSettle, also for an admission that reserves
// none ahead) is refused:
//   - with "2 seconds": the provider's window is 5 s, and the refusal
//     learns the window again (learnState.relearn);
//   - with a whole window's "3 seconds" (w kept): the probe's entry leaves
//     the learned log (learnState.refuse's probe).
func TestDifferentialLearnedProbe(t *testing.T) {
	a := diffEvent{kind: 'a', cost: 1, class: Interactive} // no reserve kept from it
	refuse := func(ms int64) diffEvent { return diffEvent{kind: 'r', pause: ms, hinted: true, prec: 1_000_000} }
	tick := func(ms int) diffEvent { return diffEvent{kind: 't', advance: time.Duration(ms) * time.Millisecond} }
	start := []diffEvent{a, a, a, a, a, tick(10), refuse(3000), tick(3000), a, a, a, a, tick(3050), a, tick(30)}
	for _, tc := range []struct {
		name, prefix, path string
		then               []diffEvent
	}{
		{"relearned", "qgrelearn", "refused probe relearned", []diffEvent{refuse(2000), tick(2000), a, a, a, a, tick(5000), a}},
		{"entry dropped", "qgprobelog", "refused probe left the learned log", []diffEvent{refuse(3000), tick(3000), a, a, a, a, a, tick(3100), a}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, rdb := newMini(t)
			seen := map[string]int{}
			diffRun(t, rdb, c, tc.prefix, nil, 0, slices.Concat(start, tc.then), seen)
			if seen[tc.path] == 0 {
				t.Errorf("the sequence did not reach %q: paths %v", tc.path, seen)
			}
		})
	}
}

// TestDifferentialLent runs through model and scripts a sequence that
// defers background work while interactive work's reserve is lent to it
// (Tuning.LendAfter after the last interactive ask): the random sequences
// reach that path too rarely to count on.
func TestDifferentialLent(t *testing.T) {
	c, rdb := newMini(t)
	bg := diffEvent{kind: 'a', cost: 1, class: Background}
	evs := []diffEvent{{kind: 'a', cost: 1, class: Interactive}, {kind: 't', advance: 31 * time.Second}}
	for range 3 { // windows of 3, spent past the reserve, then deferred
		evs = append(evs, bg, bg, bg, bg, diffEvent{kind: 't', advance: time.Second})
	}
	seen := map[string]int{}
	diffRun(t, rdb, c, "qglent", []Limit{FixedWindow(3, time.Second)}, 0, evs, seen)
	if seen["lent: code 0"] == 0 || seen["lent: code 2"] == 0 {
		t.Errorf("the sequence did not lend the reserve and defer beyond it: paths %v", seen)
	}
}

// TestDifferentialRefill runs through model and scripts a sequence in
// which a budget refills before its reset (a bucket telling when it is
// full) and admits on its refill: the random sequences reach that
// admission too rarely to count on.
func TestDifferentialRefill(t *testing.T) {
	c, rdb := newMini(t)
	a := diffEvent{kind: 'a', cost: 1, class: Background}
	tick := diffEvent{kind: 't', advance: 60 * time.Millisecond}
	evs := []diffEvent{a, a, a,
		{kind: 'o', obs: Observation{Remaining: 7, Limit: 10, Prec: 1000, Seq: 3, Reset: 375_000}},
		a, {kind: 'o', obs: Observation{Remaining: 6, Limit: 10, Prec: 1000, Seq: 4, Reset: 376_000}}}
	for range 12 { // the budget spent, then admitted as it refills
		evs = append(evs, a, a, tick)
	}
	seen := map[string]int{}
	diffRun(t, rdb, c, "qgrefill", nil, 0, evs, seen)
	if seen["budget refills, enforced"] == 0 || seen["budget refilled: admitted"] == 0 {
		t.Errorf("the sequence did not refill the budget and admit on it: paths %v", seen)
	}
}

// TestDifferentialCounter runs through model and scripts a sequence in
// which a budget is read as a sliding window counter's (go-chi/httprate): a
// window of 10 spent whole under a reset that held, the probe after it
// answered with the previous window still weighing in, admissions as that
// weight decays, and the budget rolled on at its resets.
func TestDifferentialCounter(t *testing.T) {
	c, rdb := newMini(t)
	a := diffEvent{kind: 'a', cost: 1, class: Background}
	tick := func(ms int) diffEvent { return diffEvent{kind: 't', advance: time.Duration(ms) * time.Millisecond} }
	obs := func(rem, seq, reset int64) diffEvent {
		return diffEvent{kind: 'o', obs: Observation{Remaining: rem, Limit: 10, Prec: 1_000_000, Seq: seq, Reset: reset}}
	}
	evs := []diffEvent{a, obs(9, 1, 5_000_000)}
	for i := range int64(9) {
		evs = append(evs, a, obs(8-i, 2+i, 5_000_000))
	}
	evs = append(evs, tick(5100), a, obs(0, 11, 5_000_000))
	for range 8 { // the weight decays: a unit every half second
		evs = append(evs, tick(300), a, a)
	}
	refused := diffEvent{kind: 'r', pause: 5000, hinted: true, prec: 1_000_000} // Retry-After: the whole window
	evs = append(evs, tick(2800), a, a, tick(4000), a, obs(3, 30, 6_000_000), a, a, refused, tick(1000), a, tick(11000), a, a)
	seen := map[string]int{}
	diffRun(t, rdb, c, "qgcounter", nil, 2500*time.Millisecond, evs, seen)
	if seen["budget counts"] == 0 || seen["counter rolled: admitted"] == 0 || seen["budget refilled: admitted"] == 0 ||
		seen["counter's hint shortened"] == 0 {
		t.Errorf("the sequence did not read a counter, admit on its decay and roll it: paths %v", seen)
	}
}

// TestDifferentialReadings runs through model and scripts the reading of
// a budget that the random sequences do not reach: a probe refused with 0
// left and its reset within the reading's precision (the provider writes
// its resets rounded down), then a reading of that window whose reset is
// earlier: the window's first reset stays (budgetState.keptReset).
func TestDifferentialReadings(t *testing.T) {
	a := diffEvent{kind: 'a', cost: 1, class: Background}
	tick := func(ms int) diffEvent { return diffEvent{kind: 't', advance: time.Duration(ms) * time.Millisecond} }
	obs := func(o Observation) diffEvent { o.Prec = 1_000_000; return diffEvent{kind: 'o', obs: o} }
	down := []diffEvent{a, obs(Observation{Remaining: 2, Limit: 5, Seq: 1, Reset: 500_000}), a, a, tick(600), a,
		obs(Observation{Remaining: 0, Limit: 5, Seq: 4, Reset: 1_000_000, Refused: true}),
		obs(Observation{Remaining: 0, Limit: 5, Seq: 4, Reset: 800_000})}
	for _, tc := range []struct {
		name, path string
		evs        []diffEvent
	}{
		{"rounded down", "rounded down: first reset kept", down},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, rdb := newMini(t)
			seen := map[string]int{}
			diffRun(t, rdb, c, "qgreadings", nil, 2500*time.Millisecond, tc.evs, seen)
			if seen[tc.path] == 0 {
				t.Errorf("the sequence did not reach %q: paths %v", tc.path, seen)
			}
		})
	}
}

// FuzzDifferential is TestDifferential driven by the fuzzer on miniredis:
// the seed picks the configuration, the probe and the events.
func FuzzDifferential(f *testing.F) {
	for i := range uint64(8) {
		f.Add(i, uint8(i), uint8(60))
	}
	f.Fuzz(func(t *testing.T, seed uint64, config uint8, n uint8) {
		c, rdb := newMini(t)
		ls := diffConfigs[int(config)%len(diffConfigs)]
		probe := []time.Duration{0, 2500 * time.Millisecond}[int(config/4)%2]
		diffRun(t, rdb, c, "qgfuzz", ls, probe, diffEvents(rand.New(rand.NewPCG(seed, 11)), int(n), false, seed%2 == 0), map[string]int{})
	})
}

// canonLeases are leases made comparable: empty and absent alike, in the
// sets' order.
func canonLeases(ls []lease) []lease {
	if len(ls) == 0 {
		return nil
	}
	out := slices.Clone(ls)
	slices.SortFunc(out, compareLeases)
	return out
}

// concurrentIn reports whether ls has a concurrency limit.
func concurrentIn(ls []Limit) bool {
	return slices.ContainsFunc(ls, func(l Limit) bool { return specOf(l).concurrent })
}

// diffLeases are the leases the model holds, on every concurrency limit,
// each once, in order.
func diffLeases(s State) []lease {
	var out []lease
	seen := map[string]bool{}
	for _, l := range append(slices.Clone(s.limits), s.lease) {
		for _, x := range l.leases {
			if !seen[x.id] {
				seen[x.id] = true
				out = append(out, x)
			}
		}
	}
	return out
}

// diffNow is the Redis TIME of rdb, µs.
func diffNow(t testing.TB, rdb redis.UniversalClient) int64 {
	tm, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixMicro()
}

// canonLog is a sliding log made comparable: empty and absent alike.
func canonLog(log []int64) []int64 {
	if len(log) == 0 {
		return nil
	}
	return slices.Clone(log)
}

// slidingIn reports whether ls has a sliding window.
func slidingIn(ls []Limit) bool {
	return slices.ContainsFunc(ls, func(l Limit) bool { return l.Sliding })
}

// slidingLen is how many entries the sliding logs of s hold.
func slidingLen(s State) int {
	n := 0
	for _, l := range s.limits {
		n += len(l.log)
	}
	return n
}

// TestDifferentialStart runs through model and scripts a slow start: the
// first contact's probe answered with no budget, two requests, a third
// held until they are answered, and so on until startAnswers answers end
// it; and, on another scope, a start a refusal ends.
func TestDifferentialStart(t *testing.T) {
	c, rdb := newMini(t)
	a := diffEvent{kind: 'a', cost: 1, class: Background}
	silent := diffEvent{kind: 'o', obs: Observation{Remaining: -1}}
	answer := diffEvent{kind: 'o', obs: Observation{Remaining: -1, Opened: -1}}
	tick := diffEvent{kind: 't', advance: 30 * time.Millisecond}
	over := []diffEvent{a, silent, tick, tick} // diffRun's every ninth event from the fifth reserves nothing ahead: an admission
	for range startAnswers / 2 {
		over = append(over, a, a, a, tick, answer, answer)
	}
	for _, tc := range []struct {
		name string
		evs  []diffEvent
		path string
	}{
		{"over", append(over, a, a, a), "slow start over"},
		{"refused", []diffEvent{a, silent, a, a, tick, a, {kind: 'r', pause: 1000, hinted: true, prec: 1_000_000}, tick, a}, "slow start holds"},
	} {
		seen := map[string]int{}
		diffRun(t, rdb, c, "qgstart"+tc.name, nil, 2500*time.Millisecond, tc.evs, seen)
		if seen[tc.path] == 0 || seen["slow start holds"] == 0 {
			t.Errorf("%s: the sequence did not reach %q: paths %v", tc.name, tc.path, seen)
		}
	}
}

// flightPaths counts the learned concurrency limit's paths an admission
// d took, with m after it.
func flightPaths(seen map[string]int, m State, d Decision) {
	if m.flight.phase != flightNone {
		seen[fmt.Sprintf("flight: phase %d, code %d reason %d", m.flight.phase, d.Code, d.Reason)]++
	}
	if d.Leased {
		seen["flight: leased"]++
	}
	if d.Opens > 0 && m.flight.probed(d.Opens) {
		seen["flight: probe"]++
	}
}

// TestDifferentialFlight runs through model and scripts the learned
// concurrency limit's paths, which the random sequences do not reach: a
// slow start refused at its third request in flight begins the probation
// (c = 2); after the pause the learned window's requests go two at a
// time, their leases released as they are answered; past the spent window
// probes go, and their answers confirm the limit; confirmed, a refusal at
// level 2 lowers c without a pause, and, once raises are no longer
// frozen, answers while the limit is full raise it. A second sequence has
// the probe refused: the window is the provider's; a third has probes
// answered before one is refused: limited by both, c kept, its leases
// taken beside the learned window.
func TestDifferentialFlight(t *testing.T) {
	a := diffEvent{kind: 'a', cost: 1, class: Background}
	silent := diffEvent{kind: 'o', obs: Observation{Remaining: -1}}
	answer := diffEvent{kind: 'o', obs: Observation{Remaining: -1, Opened: -1}}
	refuse := diffEvent{kind: 'r', pause: 1000, hinted: true, prec: 1_000_000} // of the last admission
	release := diffEvent{kind: 'l', answered: true}                            // the first lease held
	tick := func(ms int) diffEvent { return diffEvent{kind: 't', advance: time.Duration(ms) * time.Millisecond} }
	begin := []diffEvent{a, silent, tick(30), a, a, tick(20), answer, a, a, refuse, tick(1000)}
	var window []diffEvent
	for range 6 { // the learned window, two in flight at a time, then the probes beyond it
		window = append(window, a, answer, a, a, tick(5), release, answer, release, answer, a)
	}
	confirmed := []diffEvent{release, release, a, a, refuse, a, release, tick(61_000)}
	for range 4 {
		confirmed = append(confirmed, a, release, a, release)
	}
	for _, tc := range []struct {
		name  string
		evs   []diffEvent
		paths []string
	}{
		{"confirmed", slices.Concat(begin, window, confirmed), []string{"flight: refused 0 to 1", "flight: probe", "flight: leased",
			"flight: phase 1, code 2 reason 6", "flight: phase 2, code 0 reason 0", "flight: a refusal of the limit", "flight: raised"}},
		{"refused probe", slices.Concat(begin, window[:20], []diffEvent{a, a, refuse, tick(1000), a}), []string{"flight: refused 1 to 3"}},
		{"probe refused after answered ones", slices.Concat(begin, window[:30], []diffEvent{a, a, refuse, tick(1000), a, a, a, answer, release, release, release, tick(1000), a, a}), []string{"flight: refused 1 to 4", "flight: phase 4, code 0 reason 0", "flight: phase 4, code 2 reason 6"}},
	} {
		c, rdb := newMini(t)
		seen := map[string]int{}
		diffRun(t, rdb, c, "qgflight", nil, 2500*time.Millisecond, tc.evs, seen)
		for _, path := range tc.paths {
			if seen[path] == 0 {
				t.Errorf("%s: the sequence did not reach %q: paths %v", tc.name, path, seen)
			}
		}
	}
}
