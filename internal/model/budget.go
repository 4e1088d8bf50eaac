package model

import "math"

// The advertised budget: what the provider said is left of its quota
// (remaining, until reset), spent by the admissions since, counting the
// requests still on their way. Its rules are the functions below, each
// with a Lua twin of the same name in snake case after budget_
// (untilReset, budget_until_reset; paced, not a method, is paced), whose
// receiver is s too; each doc comment says what its rule reads, what it
// assumes of the provider, what it changes and why it holds.
//
// An admission (earliest, then spend) is answered by the first that
// applies:
//
//  1. silent (set by markSilent): a provider that advertises nothing is
//     not held by a budget.
//  2. untilReset: until its reset the budget admits while it covers the
//     cost; spent, it holds the scope until its reset or its next unit.
//  3. awaitingProbe: while a probe is out the others wait for its answer.
//  4. probeUnanswered: a probe of a scope that knows no budget, unanswered
//     past its timeout, marks the provider silent (markSilent).
//  5. probeAsks: past the reset, or at first contact, one probe asks.
//
// A response (observe) is read by these, in this order:
//
//  6. answersNothing: a probe answered with no budget marks the provider
//     silent (markSilent).
//  7. inMillis (readsMillis): a reset in milliseconds under a name of
//     seconds is read as milliseconds.
//  8. roundsDown: a probe refused just past its reset shows resets
//     written rounded down.
//  9. lowered (sameWindow, overtaken, above): an answer's remaining, less
//     the admissions after its request, read up by those that overtook it.
//  10. counts: the first answer after a reset shows a sliding window
//     counter.
//  11. fillsUntilFull (resetGrew, paced), refills: a reset that grew as
//     the budget was spent is a bucket's fill time; the budget refills.
//  12. keptReset: of two readings of one window the earlier reset is
//     kept, the first where resets are rounded down.
//  13. pace (becomesCounter): how the budget refills from the reading on.
//  14. noteReading: what the evidence of 10 and 11 needs of the reading.
//
// Between them:
//
//  15. roll: at its reset a counter's budget rolls on, without a probe.
//  16. counterPause: a counter's whole-window hint pauses the scope until
//     the budget's next unit.
//
// avail, refillAt and settle are a refilling budget's arithmetic.
//
// Invariants: never admit into a budget known to be spent before its
// reset (or, refilling, its next unit); never hold a scope past the reset
// and the probe's timeout (after them a request goes); a budget is
// forgotten LearnTTL after its reset. A scope with configured limits is
// paced by them: its budget is observed and shown, not enforced.

// probePoll is how often the workers waiting for a probe's answer look for
// it: about two round trips to a provider 25 ms away; shorter costs Redis
// round trips, longer delays the reopening.
const probePoll = 50_000 // µs

// LearnTTL is how long what a scope learned (its budget, its limit, its
// windows' alignment) outlives the observation or refusal that taught it.
// Ten minutes: long enough to carry over between bursts of polling, short
// enough that a provider's raised quota is found again within minutes.
const LearnTTL = 600_000_000 // µs

// budgetState is the budget as the scope keeps it.
type budgetState struct {
	known     bool  // a response advertised a remaining count
	remaining int64 // left to spend
	reset     int64 // µs: when the budget is whole again, 0 unknown
	limit     int64 // the quota's size, 0 unknown
	seq       int64 // admissions that spent the budget, ever (the last one's sequence number)
	refilled  int64 // seq at the last probe or refill, 0 none
	answered  int64 // readings of requests admitted since refilled
	probeAt   int64 // µs: a probe went at, 0 none out
	silent    bool  // the provider advertises nothing
	expires   int64 // µs: the record is forgotten at, 0 when empty
	per       int64 // µs: the budget refills a unit every per until its reset (0: it does not, a window's)
	at        int64 // µs: remaining was counted at (while per > 0)
	dist      int64 // µs: the last reading's reset, as the provider wrote it (from its response; 0 none)
	distSeq   int64 // the sequence number of the request that reading answered
	window    int64 // µs: a sliding window counter's window (at its reset the budget rolls on); 0 not one
	first     int64 // the remaining the first reading of the reset in force wrote
	held      bool  // a later reading of the same reset wrote another remaining: the reset held while the budget moved
	// down: the provider writes its resets rounded down (roundsDown): a
	// window's first reading is kept, not the earliest (keptReset)
	down bool
	// millis: the provider writes its resets in milliseconds under a name
	// of seconds (see readsMillis)
	millis bool
}

// avail is what the budget has to spend at now: remaining, and what it
// refilled since it was counted (up to its limit).
func (s budgetState) avail(now int64) int64 {
	if s.per <= 0 || now <= s.at {
		return s.remaining
	}
	return min(s.remaining+(now-s.at)/s.per, max(s.limit, s.remaining))
}

// refillAt is the instant a refilling budget has n to spend (math.MaxInt64
// when it never does before its reset: it does not refill, or n is beyond
// its limit).
func (s budgetState) refillAt(n int64) int64 {
	if s.per <= 0 || n > s.limit {
		return math.MaxInt64
	}
	return s.at + max(n-s.remaining, 0)*s.per
}

// roll moves a sliding window counter's budget past its resets up to now.
// At a window's end the counter forgets nothing: what the window counted
// becomes the previous window's weight, which decays over the next window
// (prev·(w − e)/w), so what was not back by the reset comes back one unit
// every window/count over the next one, and the budget rolls into a new
// window of the same length. A window that ends with the budget whole
// leaves nothing to decay.
func (s *budgetState) roll(now int64) {
	if s.window <= 0 || !s.known || s.reset <= 0 || now < s.reset {
		return
	}
	rem := s.avail(s.reset)
	c := s.limit - rem
	s.refilled, s.at, s.answered = s.seq, s.reset, 0
	if c <= 0 {
		s.remaining, s.per = max(s.limit, rem), 0
		s.reset += ((now-s.reset)/s.window + 1) * s.window
		return
	}
	s.remaining, s.per = rem, (s.window+c-1)/c
	s.reset += s.window
	s.roll(now)
}

// settle counts what the budget refilled until now into remaining, keeping
// the part of a unit already refilled.
func (s *budgetState) settle(now int64) {
	if s.per <= 0 || now <= s.at {
		return
	}
	k := (now - s.at) / s.per
	if s.remaining+k >= s.limit {
		s.remaining, s.at = max(s.limit, s.remaining), now
		return
	}
	s.remaining, s.at = s.remaining+k, s.at+k*s.per
}

// budgetVerdict is what the budget says of an admission at now.
type budgetVerdict struct {
	at     int64  // µs: not before (0: now)
	why    Reason // reasonBudget or reasonProbe, with at
	probe  bool   // the admission is a probe
	spend  bool   // it spends remaining
	silent bool   // the probe brought nothing back: the provider is silent
}

// earliest is what the budget says of an admission of cost at now that
// leaves k unspent (class.go): a silent provider's budget holds nothing;
// else the first of its rules that applies answers (untilReset,
// awaitingProbe, probeUnanswered, probeAsks); when none does, nothing is
// held.
func (s budgetState) earliest(p Params, now, cost int64, k keeper) budgetVerdict {
	if s.silent {
		return budgetVerdict{}
	}
	if v, ok := s.untilReset(now, cost, k); ok {
		return v
	}
	if v, ok := s.awaitingProbe(p, now); ok {
		return v
	}
	if s.probeUnanswered() {
		return budgetVerdict{silent: true}
	}
	v, _ := s.probeAsks(p, now, k)
	return v
}

// untilReset is the window's budget: until its reset (or, with no reset
// advertised, for as long as it is known) the budget admits while what it
// has at now (avail), less k's share of its size and k's claims, covers
// cost. The provider's remaining is its word for its window: past it, it
// refuses. What k alone holds back is asked for again at k's lapse (or at
// the reset, or at the unit a refilling budget brings back, whichever is
// first); a spent budget holds the scope until its reset, or a refilling
// one's next unit. ok is false when nothing is known or the reset has
// passed: the probe's rules answer then.
func (s budgetState) untilReset(now, cost int64, k keeper) (v budgetVerdict, ok bool) {
	if !s.known || s.reset != 0 && s.reset <= now {
		return budgetVerdict{}, false
	}
	kept, rem := k.of(s.limit), s.avail(now)
	switch {
	case rem-kept >= cost:
		return budgetVerdict{spend: true}, true
	case rem >= cost && s.reset > now:
		return budgetVerdict{at: min(k.lapse, s.reset, s.refillAt(cost+kept)), why: ReasonBudget}, true
	case rem >= cost:
		return budgetVerdict{at: k.lapse, why: ReasonBudget}, true
	case s.reset > now:
		return budgetVerdict{at: min(s.reset, s.refillAt(cost)), why: ReasonBudget}, true
	}
	return budgetVerdict{}, false
}

// awaitingProbe holds the scope while a probe is out, until its timeout:
// past a reset the budget's size is unknown (a window whole again, a
// bucket one token fuller: dialects differ), and the probe's answer will
// tell it, so the others wait for it, looking every probePoll. A task with
// no place to wait in its process (Params.NowOnly) goes instead, as in a
// slow start: deferred, asynq would bring it back a whole second later,
// for a wait of about one round trip. ok is false when no probe is out or
// its timeout has passed.
func (s budgetState) awaitingProbe(p Params, now int64) (v budgetVerdict, ok bool) {
	switch {
	case s.probeAt <= 0 || now >= s.probeAt+p.Probe:
		return budgetVerdict{}, false
	case p.NowOnly:
		return budgetVerdict{}, true
	}
	return budgetVerdict{at: min(s.probeAt+p.Probe, now+probePoll), why: ReasonProbe}, true
}

// probeUnanswered reports whether the probe of a scope that knows no
// budget went unanswered past its timeout (awaitingProbe no longer holds
// it): the provider is read silent (markSilent), as when the probe is
// answered with no budget (answersNothing). A provider that advertises
// nothing is not held by a budget it never tells.
func (s budgetState) probeUnanswered() bool { return !s.known && s.probeAt > 0 }

// probeAsks sends the probe: past the reset (or at the scope's first
// contact, which learns whether the provider advertises a budget at all)
// one request goes to ask while the others wait for its answer
// (awaitingProbe). While interactive claims wait (k.claims) no admission
// that leaves them unspent is the probe: it asks again at k's lapse, or
// the next probePoll. ok is false when probes are off (p.Probe 0).
func (s budgetState) probeAsks(p Params, now int64, k keeper) (v budgetVerdict, ok bool) {
	switch {
	case p.Probe <= 0:
		return budgetVerdict{}, false
	case k.claims > 0:
		return budgetVerdict{at: min(k.lapse, now+probePoll), why: ReasonProbe}, true
	}
	return budgetVerdict{probe: true}, true
}

// spend commits an admission at now that v allowed, and returns whether
// it is a probe and its sequence number (0 when it spends no budget).
func (s *budgetState) spend(p Params, now, cost int64, v budgetVerdict) (probe bool, seq int64) {
	switch {
	case v.silent:
		s.markSilent(now)
	case v.probe:
		s.refilled, s.answered = s.seq, 0
		s.seq += cost
		s.probeAt = now
		s.expires = max(s.expires, now+LearnTTL)
		return true, s.seq
	case v.spend:
		s.settle(now)
		s.remaining -= cost
		s.seq += cost
		return false, s.seq
	}
	return false, 0
}

// markSilent records at now that the provider advertises no budget: no
// probe is out, none goes again, and the budget holds nothing until this
// is forgotten, LearnTTL later (a provider may start advertising one).
func (s *budgetState) markSilent(now int64) {
	s.silent, s.probeAt = true, 0
	s.expires = now + LearnTTL
}

// quiet reports whether nothing but an announced write can make the
// budget hold the scope: the provider is silent, or nothing is known and
// no probe can be sent.
func (s budgetState) quiet(p Params) bool {
	return s.silent || !s.known && s.probeAt == 0 && p.Probe == 0
}

// Observation is the budget a response advertised.
type Observation struct {
	Remaining int64 // -1: the response advertises no budget; -2: no response seen (an answer only)
	Reset     int64 // µs until the budget is whole again, 0 unknown
	Limit     int64 // the quota's size, 0 unknown
	Prec      int64 // µs: the reset's precision
	// Alt: µs, the reset read as milliseconds, when it is a whole number
	// under a name of seconds that may be (hint.ResetSeconds; 0: it is not
	// in question); millis: the reset was read as milliseconds from such
	// a name (hint.ResetMillis)
	Alt     int64
	Millis  bool
	Seq     int64 // of the request answered (Decision.Seq); 0 unknown
	Opened  int64 // µs: the request answered opened a learned window (Decision.Opens); 0 not
	Refused bool  // the response is a refusal (its pause is recorded apart)
	// RTT: µs from sending the answered request to its response (0
	// unknown). The provider read its reset when the request arrived, and
	// the observation dates it later by up to this: its alignment is read
	// to max(prec, RTT) (see State.Observe)
	RTT int64
}

// observe records o at now. It returns the reset in force and its
// precision, and announce: the scope has a budget it did not have (open
// caches must forget it). It reads o by the budget's rules, in this order
// (see the list at the top of the file).
func (s *budgetState) observe(now int64, o Observation) (reset, prec int64, announce bool) {
	if o.Remaining < 0 {
		if s.answersNothing(o) {
			s.markSilent(now)
		}
		return 0, 0, false
	}
	o = s.inMillis(now, o)
	// first contact with no probe out: a scope open caches may keep as
	// quiet (see quiet) now has a budget
	fresh := !s.known && s.probeAt == 0
	if s.roundsDown(o) {
		s.down = true
	}
	rd := s.readingOf(now, o)
	rd.same = s.sameWindow(now, rd.u, o.Prec)
	rd.r = s.lowered(now, o, rd.same)
	if o.Seq > 0 {
		s.answered++
	}
	rd.counter = s.window == 0 && s.counts(now, o, rd.u, rd.lim)
	rd.grew = s.fillsUntilFull(now, o, rd)
	rd.refills = s.refills(rd)
	rd.u = s.keptReset(rd)
	s.pace(now, o, rd)
	s.noteReading(o, rd.same)
	s.known, s.remaining, s.reset, s.probeAt, s.silent, s.limit = true, rd.r, rd.u, 0, false, rd.lim
	s.expires = max(rd.u, now) + LearnTTL
	return rd.u, o.Prec, fresh
}

// reading is an observation as the budget reads it (observe).
type reading struct {
	u       int64 // µs: the reset read (0 unknown), then the one kept (keptReset)
	lim     int64 // the quota's size: the reading's, else the one known
	r       int64 // the remaining read (lowered)
	same    bool  // u is a reading of the reset in force (sameWindow)
	counter bool  // the reading shows a sliding window counter (counts)
	grew    bool  // the reset grew as a bucket's fill time does (fillsUntilFull)
	refills bool  // the budget refills before its reset (refills)
}

// readingOf is what o says of its own: the reset at now + o.Reset (0
// unknown) and the quota's size, o's, else the one known.
func (s budgetState) readingOf(now int64, o Observation) reading {
	rd := reading{lim: s.limit}
	if o.Reset > 0 {
		rd.u = now + o.Reset
	}
	if o.Limit > 0 {
		rd.lim = o.Limit
	}
	return rd
}

// answersNothing reports whether o, a response that advertises no budget
// (Remaining −1; −2 is no response at all), answers the probe of a scope
// that knows none: the probe asked whether the provider advertises a
// budget, and it does not (markSilent), as when the probe goes unanswered
// (probeUnanswered).
func (s budgetState) answersNothing(o Observation) bool {
	return o.Remaining == -1 && s.probeAt > 0 && !s.known
}

// inMillis is o with its reset read as milliseconds when it is (o.Alt,
// readsMillis), to the millisecond's precision; a reading so, or o's own
// (o.Millis), makes the scope read its resets so from then on.
func (s *budgetState) inMillis(now int64, o Observation) Observation {
	if o.Alt > 0 && s.readsMillis(now, o) {
		o.Reset, o.Prec, o.Millis = o.Alt, millisPrec, true
	}
	s.millis = s.millis || o.Millis
	return o
}

// roundsDown reports whether o shows that the provider writes its resets
// rounded down (down): o refuses the probe, which went once the reset it
// waited for had passed, with the budget spent and its reset within the
// reading's precision, so the window's end is within the second the reset
// was written in, not before it. A reset in epoch seconds read against the
// whole-second Date header is the reading's instant plus the whole seconds
// between them: written rounded down, the window's end may follow it by up
// to a second (keptReset).
func (s budgetState) roundsDown(o Observation) bool {
	return o.Refused && o.Remaining == 0 && s.known && s.probeAt > 0 && o.Reset > 0 && o.Reset <= o.Prec
}

// sameWindow reports whether u, the reset read, is the reset in force to
// the reading's precision: the reading is of the window in force.
func (s budgetState) sameWindow(now, u, prec int64) bool {
	return u > 0 && s.reset > now && abs(u-s.reset) < prec
}

// lowered is the remaining o reads. The provider counted the requests it
// received before the one it answered, not those admitted after it and
// still on their way: its remaining is lowered by the units admitted after
// its own sequence number, none below 0. An answer that other requests
// overtook (overtaken) is read up by those that reached the provider
// before it (above), and never above what the budget had.
func (s budgetState) lowered(now int64, o Observation, same bool) int64 {
	later := int64(0)
	if o.Seq > 0 {
		later = max(s.seq-o.Seq, 0)
	}
	if !s.overtaken(o, same) {
		return max(o.Remaining-later, 0)
	}
	later = max(later-s.above(o), 0)
	return min(max(o.Remaining-later, 0), s.avail(now))
}

// fillsUntilFull reports whether the budget's reset is a bucket's "until
// full" (throttled's GCRA) rather than a window's end: the reset as the
// provider wrote it grew since the last reading (resetGrew) while the reset
// in force was still ahead and the budget did not rise, and it moved by no
// more than the pace its distance tells (paced). No window's end moves
// later before it passes, and a bucket telling its next token moves it
// later only as the budget rises (a token came); a bucket telling when it
// is full moves it later with every request spent. A sliding window
// counter's budget (window) is paced apart.
func (s budgetState) fillsUntilFull(now int64, o Observation, rd reading) bool {
	return s.window == 0 && s.known && s.reset > now && s.resetGrew(o) && rd.r <= s.avail(now) &&
		rd.lim > rd.r && paced(rd.u-s.reset, o.Seq-s.distSeq, o.Reset/(rd.lim-rd.r)+o.Prec)
}

// resetGrew reports whether o's reset, as the provider wrote it, is
// further than the last reading's (dist), which answered an earlier
// request (distSeq).
func (s budgetState) resetGrew(o Observation) bool {
	return o.Seq > s.distSeq && s.distSeq > 0 && o.Reset > s.dist
}

// refills reports whether the budget refills before its reset: it did
// (per), or its reset grew as a bucket's fill time (fillsUntilFull), and
// the reading has a reset and room below its limit. A sliding window
// counter's budget (window) is paced apart (pace).
func (s budgetState) refills(rd reading) bool {
	return (s.per > 0 || rd.grew) && rd.u > 0 && rd.lim > rd.r && s.window == 0
}

// keptReset is the reset kept of a reading: of two resets read for the
// window in force (same) the earlier is kept, as resets are read rounded
// up (a reset in whole seconds is the reading's instant plus the seconds it
// says, after the window's end by up to a second). Where the provider
// writes them rounded down (down) every reading is the end or before it by
// up to a second, and the window's first reading, kept when it came (it is
// not same), stays: the answer of the window's first request is the end or
// after it whenever that request opened the window (a window counted from
// its first request ends its length after it; one on the clock began
// before it), so the next probe is not sent early and refused. A budget
// that refills keeps the reading's own reset, its fill time.
func (s budgetState) keptReset(rd reading) int64 {
	switch {
	case rd.refills || !rd.same:
		return rd.u
	case s.down:
		return s.reset
	}
	return min(rd.u, s.reset)
}

// pace sets how the budget refills from the reading on (per, at): a budget
// that reads a sliding window counter for the first time paces as one
// (becomesCounter); a counter keeps its pace, anchored at the reading; a
// budget that refills is a bucket full at its reset, one unit every
// per = (reset − now)/(limit − remaining) from the reading on, a lower
// bound of a bucket full at the reset however its reset is rounded up
// (its tokens are a straight line from remaining now to limit at its true
// fill time, no later than the reset). Each later reading anchors it again
// at the same pace (a bucket refilling faster shows it in the next
// reading's remaining, and keeps it: a bucket loses no token until it is
// full); only a reading whose reset grew again sets the pace anew (a reset
// that stays where it was, as a window counter's end does, would make the
// pace faster with every unit spent). Any other budget does not refill.
func (s *budgetState) pace(now int64, o Observation, rd reading) {
	per := s.per
	s.per, s.at = 0, 0
	switch {
	case rd.counter:
		s.becomesCounter(now, o, rd)
	case s.window > 0:
		s.per, s.at = per, now
	case rd.refills:
		if rd.grew || per == 0 {
			per = (rd.u - now + rd.lim - rd.r - 1) / (rd.lim - rd.r)
		}
		s.per, s.at = per, now
	}
}

// becomesCounter paces a budget read as a sliding window counter's
// (counts): the deficit d of the probe's answer beyond what the new
// window's own requests spent is the previous window's weight, which
// decays to nothing at the next window's end, so the budget refills one
// unit every (reset − now)/d; the counter's window is the distance between
// the two resets, to their precision (window ends written in whole seconds
// are whole seconds apart, each read late by less than a second, the old
// one the earliest of its window's readings). At each reset after that the
// budget rolls on without a probe (roll).
func (s *budgetState) becomesCounter(now int64, o Observation, rd reading) {
	d := rd.lim - o.Remaining - (o.Seq - s.refilled)
	s.window, s.per, s.at = max((2*(rd.u-s.reset)+o.Prec)/(2*o.Prec)*o.Prec, o.Prec), (rd.u-now+d-1)/d, now
}

// noteReading keeps what later readings' evidence needs: the reset as the
// provider wrote it and the request it answered, when that is the newest
// read (dist, distSeq: resetGrew, overtaken); and whether the reset in
// force held while the remaining counts its readings advertised moved
// (first, held: counts), a window's end rather than a bucket's next token.
func (s *budgetState) noteReading(o Observation, same bool) {
	if o.Seq > s.distSeq {
		s.dist, s.distSeq = o.Reset, o.Seq
	}
	switch {
	case same && o.Remaining != s.first:
		s.held = true
	case !same:
		s.first, s.held = o.Remaining, false
	}
}

// readsMillis reports whether o's reset, a whole number under a name of
// seconds that may be milliseconds (o.Alt, hint.ResetSeconds), is
// milliseconds: the scope's resets were read so (a number above an hour
// under that name, hint.ResetMillis, or an earlier such reading), or its
// milliseconds reading falls within its precision of the window in force
// where its seconds reading lies more than millisRatio times beyond it (or
// beyond a second, when the window in force ends sooner). A limiter that
// writes milliseconds under X-RateLimit-Reset writes numbers of at most an
// hour in every window's last 3.6 s: read as seconds, a window's last
// "1947" would hold the scope for 32 minutes (a refusal's pause, or a
// spent budget's reset; TestTransportResetsInMilliseconds). A scope whose first
// reading is such a number (a window shorter than 3.6 s) reads it as
// seconds, as the hint package does: nothing tells it otherwise yet.
func (s budgetState) readsMillis(now int64, o Observation) bool {
	return s.millis || s.known && s.reset > now && abs(now+o.Alt-s.reset) < o.Prec && o.Reset > millisRatio*max(s.reset-now, o.Prec)
}

// millisRatio is how far beyond the window in force a reset's seconds
// reading must lie for its milliseconds reading to be taken: an order of
// magnitude, where milliseconds read as seconds lie three beyond it. A
// bucket's time until it is full grows from a fraction of a second to "2"
// as it is spent: its seconds reading lies a second or so beyond the window
// in force, and is not to be read as milliseconds.
const millisRatio = 10

// millisPrec is the precision of a reset written in milliseconds (µs).
const millisPrec = 1000

// overtaken reports whether o, a reading of the window in force (same),
// answers a request that the newest request read in it (distSeq) overtook
// on its way to the provider: o's sequence number is the lower, its answer
// came after, and its reset lies beyond its precision. The provider counted
// the requests that overtook it before it, so o's remaining, lowered by
// every admission after its own, says a unit less than is left for each:
// it is read up by them (above): they are not lowered from it, never
// more of them than were admitted after it, so it is never read above
// what it said, nor above what the budget had. Read as it was, a budget
// short by them would hold a window's last task until the next window.
// They are taken off the admissions lowered from it, before the floor at
// 0 (lowered): read up after the floor, a spent window's last, overtaken
// answer would read units left that are not, and send requests into the
// spent window. A reset within its precision may be a bucket's next
// token, whose remaining grows between readings: such readings are read
// as they are.
func (s budgetState) overtaken(o Observation, same bool) bool {
	return same && o.Seq > 0 && o.Seq <= s.distSeq && s.distSeq > s.refilled && o.Reset > o.Prec
}

// above is a lower bound of the requests admitted after o's that reached
// the provider before it (o overtaken): the newest one read, and every
// reading since the last probe that cannot be of a request admitted before
// o's (there are o.Seq − refilled − 1 units of those at most). When answers
// come in the order their requests arrived, and none is lost, it is exact:
// a burst that arrived in reverse order is read whole by its last answer,
// where read a unit up only it would be read short by all but one of its
// requests, and hold the window's last tasks until its end.
func (s budgetState) above(o Observation) int64 {
	return max(1, s.answered-(o.Seq-s.refilled-1))
}

// counterPause is the pause (ms) of a refusal hinted ms by a sliding
// window counter's provider. A hint no longer than the counter's window
// (and its precision) is the window's length, not the wait: go-chi/httprate
// writes Retry-After as the whole window whatever the wait
// (go-chi/httprate#47), while its budget, read from the same response, comes back one unit at a
// time as the previous window's weight decays. Such a refusal pauses the
// scope until the budget's next unit (or its reset), at least MinPause, and
// never longer than the hint. A longer hint is the provider's own word, and
// so is every hint of a budget that is not a counter's.
func (s budgetState) counterPause(now, ms, prec int64) int64 {
	if s.window <= 0 || !s.known || s.reset <= now || ms*1000 > s.window+prec {
		return ms
	}
	next := min(s.reset, s.refillAt(1))
	return min(ms, max(MinPause.Milliseconds(), ceilMs(next-now)))
}

// minCounterWindow is the shortest window a budget is read as a sliding
// window counter's: counters count windows of seconds (httprate's,
// Cloudflare's 10 s and a minute), while a reset that moved less than a
// second after the window before was spent is a bucket's next token
// (Discord's X-RateLimit-Reset-After), which a counter's pace would hold
// below its rate.
const minCounterWindow = 1_000_000 // µs

// counts reports whether o, the answer to the first request after the
// reset in force passed, reads a sliding window counter (go-chi/httprate's,
// Cloudflare's): a budget that is not whole after its window's end, because
// the window before still weighs in (prev·(w − e)/w), and that comes back
// as that weight decays to nothing at the next window's end. The evidence:
// the reset held while readings of the window before advertised different
// remaining counts (a window's end, not a bucket's next token, which moves
// as tokens come); the new reset lies more than twice its precision after
// the old one (a new window, not a reset rounded up to the second); and
// the answer advertises less than the limit beyond what this window's own
// requests spent, by more than the requests of the window before still
// unanswered (those admitted after its last answered one: a request sent
// before the reset may arrive after the window's end and count in the
// next). A fixed window is whole after its reset, and so is a bucket at its
// "until full"; a bucket telling its next token does not hold its reset
// while the budget moves. The distance between the resets is a window
// only when the answer came within the first half of it (its reset
// further ahead than the old one is behind): a bucket's next token is
// never further ahead than a token's time (rounded up, a precision), so
// read once a pause has held the scope a second past the reset, it lies
// two seconds after it, and read as a counter of a 2 s window the bucket
// would be paced below its rate. A counter read so late in its window is
// read at its next reset.
func (s budgetState) counts(now int64, o Observation, u, lim int64) bool {
	return s.known && s.held && s.reset > 0 && s.reset <= now && o.Seq > s.refilled && s.refilled > 0 &&
		u-s.reset >= max(2*o.Prec, minCounterWindow) && u-now > now-s.reset &&
		lim-o.Remaining-(o.Seq-s.refilled) > s.refilled-s.distSeq
}

// paced reports whether a reset that moved later by move while k units
// were spent is a bucket's fill time at a pace of per µs a unit: it moved
// by no more than one unit's time for each unit spent and the one it
// answered. A bucket telling its next token moves it a whole token's time
// for the one token that came and went (Discord's Reset-After read by a
// request that took that token), where its pace, read as a fill time, is
// the token's time over the limit.
func paced(move, k, per int64) bool { return move <= 0 || move/(k+1) <= per }

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// luaBudgetRefill is a refilling budget's arithmetic (budgetState.avail,
// refillAt, settle): what it has to spend at now (now_us but where roll
// asks at its reset), when it has n, and what it refilled counted into
// remaining.
const luaBudgetRefill = `
local function budget_avail(s, now)
  if s.per <= 0 or now <= s.at then return s.remaining end
  return math.min(s.remaining + math.floor((now - s.at) / s.per), math.max(s.limit, s.remaining))
end
local function budget_refill_at(s, n)
  if s.per <= 0 or n > s.limit then return math.huge end
  return s.at + math.max(n - s.remaining, 0) * s.per
end
local function budget_settle(s)
  if s.per <= 0 or now_us <= s.at then return end
  local k = math.floor((now_us - s.at) / s.per)
  if s.remaining + k >= s.limit then s.remaining, s.at = math.max(s.limit, s.remaining), now_us
  else s.remaining, s.at = s.remaining + k, s.at + k * s.per end
end
`

// luaBudgetCounter is a sliding window counter's budget (budgetState.roll,
// counts): its roll past its resets (roll's recursion as a loop), and the
// evidence that a budget is one.
const luaBudgetCounter = `
local function budget_roll(s)
  while s.window > 0 and s.known and s.reset > 0 and now_us >= s.reset do
    local rem = budget_avail(s, s.reset)
    local c = s.limit - rem
    s.refilled, s.at, s.answered, s.dirty = s.seq, s.reset, 0, true
    if c <= 0 then
      s.remaining, s.per = math.max(s.limit, rem), 0
      s.reset = s.reset + (math.floor((now_us - s.reset) / s.window) + 1) * s.window
    else
      s.remaining, s.per, s.reset = rem, math.floor((s.window + c - 1) / c), s.reset + s.window
    end
  end
end
local function budget_counts(s, o, u, lim)
  return s.known and s.held and s.reset > 0 and s.reset <= now_us and o.seq > s.refilled and s.refilled > 0
    and u - s.reset >= math.max(2 * o.prec, C.minCounterWindow) and u - now_us > now_us - s.reset
    and lim - o.remaining - (o.seq - s.refilled) > s.refilled - s.distSeq
end
`

// luaBudgetPause is budgetState.counterPause: a counter's whole-window
// hint shortened to its budget's next unit.
const luaBudgetPause = `
local function budget_counter_pause(s, ms, prec)
  if s.window <= 0 or not s.known or s.reset <= now_us or ms * 1000 > s.window + prec then return ms end
  local next = math.min(s.reset, budget_refill_at(s, 1))
  return math.min(ms, math.max(C.minPause, math.ceil((next - now_us) / 1000)))
end
`

// luaBudgetRules is the admission's rules of the budget, in earliest's
// order (budgetState.untilReset, awaitingProbe, probeUnanswered,
// probeAsks; markSilent, quiet): each answers a verdict (budgetVerdict),
// or nil when it does not apply.
const luaBudgetRules = `
local function budget_until_reset(s, cost, k)
  if not s.known or (s.reset ~= 0 and s.reset <= now_us) then return nil end
  local kept, rem = keeper_of(k, s.limit), budget_avail(s, now_us)
  if rem - kept >= cost then return {at = 0, spend = true} end
  if rem >= cost and s.reset > now_us then
    return {at = math.min(k.lapse, s.reset, budget_refill_at(s, cost + kept)), why = C.reasonBudget}
  end
  if rem >= cost then return {at = k.lapse, why = C.reasonBudget} end
  if s.reset > now_us then return {at = math.min(s.reset, budget_refill_at(s, cost)), why = C.reasonBudget} end
  return nil
end
local function budget_awaiting_probe(s)
  if s.probeAt <= 0 or now_us >= s.probeAt + C.probe then return nil end
  if C.nowOnly then return {at = 0} end
  return {at = math.min(s.probeAt + C.probe, now_us + C.probePoll), why = C.reasonProbe}
end
local function budget_probe_unanswered(s) return not s.known and s.probeAt > 0 end
local function budget_probe_asks(s, k)
  if C.probe <= 0 then return nil end
  if k.claims > 0 then return {at = math.min(k.lapse, now_us + C.probePoll), why = C.reasonProbe} end
  return {at = 0, probe = true}
end
local function budget_mark_silent(s)
  s.silent, s.probeAt, s.expires, s.dirty = true, 0, now_us + C.learnTTL, true
end
local function budget_quiet(s) return s.silent or not s.known and s.probeAt == 0 and C.probe == 0 end
`

// luaBudget is the budget's transaction as admissions meet it
// (budgetState.earliest, spend), on a hash with the fields of
// budgetFields.
const luaBudget = luaBudgetRules + `
local function budget_earliest(s, cost, k)
  if s.silent then return {at = 0} end
  local v = budget_until_reset(s, cost, k)
  if v then return v end
  v = budget_awaiting_probe(s)
  if v then return v end
  if budget_probe_unanswered(s) then return {at = 0, silent = true} end
  return budget_probe_asks(s, k) or {at = 0}
end
local function budget_spend(s, cost, v)
  if v.silent then
    budget_mark_silent(s)
  elseif v.probe then
    s.refilled, s.answered, s.seq, s.probeAt = s.seq, 0, s.seq + cost, now_us
    s.expires, s.dirty = math.max(s.expires, now_us + C.learnTTL), true
    return true, s.seq
  elseif v.spend then
    budget_settle(s)
    s.remaining, s.seq, s.dirty = s.remaining - cost, s.seq + cost, true
    return false, s.seq
  end
  return false, 0
end
`

// luaBudgetRead is the reading of a response's budget (budgetState's
// answersNothing, readsMillis, inMillis, roundsDown, readingOf,
// sameWindow, overtaken, above, lowered); o is the observation
// (Observation's fields, lower-cased), rd the reading (see reading).
const luaBudgetRead = `
local function budget_answers_nothing(s, o) return o.remaining == -1 and s.probeAt > 0 and not s.known end
local function budget_reads_millis(s, o)
  return s.millis or s.known and s.reset > now_us and math.abs(now_us + o.alt - s.reset) < o.prec
    and o.reset > C.millisRatio * math.max(s.reset - now_us, o.prec)
end
local function budget_in_millis(s, o)
  if o.alt > 0 and budget_reads_millis(s, o) then o.reset, o.prec, o.millis = o.alt, C.millisPrec, true end
  s.millis = s.millis or o.millis
  return o
end
local function budget_rounds_down(s, o)
  return o.refused and o.remaining == 0 and s.known and s.probeAt > 0 and o.reset > 0 and o.reset <= o.prec
end
local function budget_reading_of(s, o)
  local rd = {u = 0, lim = s.limit}
  if o.reset > 0 then rd.u = now_us + o.reset end
  if o.limit > 0 then rd.lim = o.limit end
  return rd
end
local function budget_same_window(s, u, prec) return u > 0 and s.reset > now_us and math.abs(u - s.reset) < prec end
local function budget_overtaken(s, o, same)
  return same and o.seq > 0 and o.seq <= s.distSeq and s.distSeq > s.refilled and o.reset > o.prec
end
local function budget_above(s, o) return math.max(1, s.answered - (o.seq - s.refilled - 1)) end
local function budget_lowered(s, o, same)
  local later = 0
  if o.seq > 0 then later = math.max(s.seq - o.seq, 0) end
  if not budget_overtaken(s, o, same) then return math.max(o.remaining - later, 0) end
  later = math.max(later - budget_above(s, o), 0)
  return math.min(math.max(o.remaining - later, 0), budget_avail(s, now_us))
end
`

// luaBudgetPace is what a reading does to the budget's pace and the reset
// it keeps (budgetState's resetGrew, paced, fillsUntilFull, refills,
// keptReset, becomesCounter, pace, noteReading).
const luaBudgetPace = `
local function budget_reset_grew(s, o) return o.seq > s.distSeq and s.distSeq > 0 and o.reset > s.dist end
local function paced(move, k, per) return move <= 0 or math.floor(move / (k + 1)) <= per end
local function budget_fills_until_full(s, o, rd)
  return s.window == 0 and s.known and s.reset > now_us and budget_reset_grew(s, o) and rd.r <= budget_avail(s, now_us)
    and rd.lim > rd.r and paced(rd.u - s.reset, o.seq - s.distSeq, math.floor(o.reset / (rd.lim - rd.r)) + o.prec)
end
local function budget_refills(s, rd) return (s.per > 0 or rd.grew) and rd.u > 0 and rd.lim > rd.r and s.window == 0 end
local function budget_kept_reset(s, rd)
  if rd.refills or not rd.same then return rd.u end
  if s.down then return s.reset end
  return math.min(rd.u, s.reset)
end
local function budget_becomes_counter(s, o, rd)
  local d = rd.lim - o.remaining - (o.seq - s.refilled)
  s.window = math.max(math.floor((2 * (rd.u - s.reset) + o.prec) / (2 * o.prec)) * o.prec, o.prec)
  s.per, s.at = math.floor((rd.u - now_us + d - 1) / d), now_us
end
local function budget_pace(s, o, rd)
  local per = s.per
  s.per, s.at = 0, 0
  if rd.counter then budget_becomes_counter(s, o, rd)
  elseif s.window > 0 then s.per, s.at = per, now_us
  elseif rd.refills then
    if rd.grew or per == 0 then per = math.floor((rd.u - now_us + rd.lim - rd.r - 1) / (rd.lim - rd.r)) end
    s.per, s.at = per, now_us
  end
end
local function budget_note_reading(s, o, same)
  if o.seq > s.distSeq then s.dist, s.distSeq = o.reset, o.seq end
  if same and o.remaining ~= s.first then s.held = true elseif not same then s.first, s.held = o.remaining, false end
end
`

// luaBudgetObserve is the budget's transaction as a response advertises it
// (budgetState.observe): its rules (luaBudgetRead, luaBudgetPace) in
// observe's order. It answers the reset in force, its precision, and
// whether to announce the scope.
const luaBudgetObserve = luaBudgetRead + luaBudgetPace + `
local function budget_observe(s, o)
  if o.remaining < 0 then
    if budget_answers_nothing(s, o) then budget_mark_silent(s) end
    return 0, 0, false
  end
  o = budget_in_millis(s, o)
  local fresh = not s.known and s.probeAt == 0
  if budget_rounds_down(s, o) then s.down = true end
  local rd = budget_reading_of(s, o)
  rd.same = budget_same_window(s, rd.u, o.prec)
  rd.r = budget_lowered(s, o, rd.same)
  if o.seq > 0 then s.answered = s.answered + 1 end
  rd.counter = s.window == 0 and budget_counts(s, o, rd.u, rd.lim)
  rd.grew = budget_fills_until_full(s, o, rd)
  rd.refills = budget_refills(s, rd)
  rd.u = budget_kept_reset(s, rd)
  budget_pace(s, o, rd)
  budget_note_reading(s, o, rd.same)
  s.known, s.remaining, s.reset, s.probeAt, s.silent, s.limit = true, rd.r, rd.u, 0, false, rd.lim
  s.expires, s.dirty = math.max(rd.u, now_us) + C.learnTTL, true
  return rd.u, o.prec, fresh
end
`

// luaBudgetRecord loads the budget hash as budgetState (a record past its
// expires is none) rolled to now (State.Normalize), and saves it back when
// a transition changed it.
const luaBudgetRecord = `
local function budget_load(key)
  local s, v = hrecord(key, budgetFields)
  s.known = s.expires > 0 and int(v.remaining) ~= nil
  s.silent, s.held, s.down, s.millis = s.silent == C.flagOn, s.held == C.flagOn, s.down == C.flagOn, s.millis == C.flagOn
  budget_roll(s)
  return s
end
local function budget_save(s)
  hsave(s, budgetFields, not s.known and 'remaining' or nil) -- remaining absent: nothing advertised
end
`
