package model

import "github.com/quotagate/quotagate/internal/schema"

// The calls: each operation's KEYS and ARGV, built here and only here, so
// that the store (which runs the scripts against Redis) and the
// differential test (which runs them beside the Go model) pass the same
// arguments in the same order as the script's header documents.

// AdmitRequest is what an admission asks (AdmitScript).
type AdmitRequest struct {
	Limits   []LimitSpec // the configured limits, in order
	Cost     int64       // at least 1
	Hold     int64       // µs: how far ahead a slot may be reserved
	MaxPause int64       // ms: a deadline farther ahead is malformed
	Probe    int64       // µs: a budget probe's timeout (0: responses are not observed)
	Dry      bool        // commit nothing: what would an admission say (State)
	NowOnly  bool        // reserve no slot ahead (Params.NowOnly)
	Answer   int64       // µs: a learned window's probe's timeout
	Counts   int64       // admissions no script counted, reported first
	Age      int64       // µs: how long before the call the first of Counts was admitted
	Class    Class
	Reserve  int64  // per mille left to interactive work
	Lend     int64  // µs: after this long without interactive work, its reserve is lent
	Lease    string // the admission's lease id on the concurrency limits
	Expect   bool   // interactive work is expected (Params.Expect)
}

// Call returns the keys and arguments of AdmitScript for the scope of k.
func (r AdmitRequest) Call(k schema.Keys) ([]string, []any) {
	mode := modeAdmit
	if r.Dry {
		mode = modeDry
	} else if r.NowOnly {
		mode = modeNowOnly
	}
	line := k.Line
	if r.Class == Interactive {
		line = k.ILine
	}
	return limitArgs(k, r.Limits, []string{k.Pause, line, k.Budget, k.Learn, k.LearnWin, k.PauseBy, k.Class, k.Fallback, k.LearnLog, k.Start, k.Flight, k.FlightConc},
		[]any{max(r.Cost, 1), r.Hold, r.MaxPause, r.Probe, mode, r.Answer, r.Counts, r.Age, int(r.Class), r.Reserve, r.Lend, r.Lease, boolArg(r.Expect)})
}

// The modes of an admission (AdmitScript's mode): commit what it admits,
// commit nothing (a dry run: State), or reserve no slot ahead
// (Params.NowOnly).
const (
	modeAdmit   = 0
	modeDry     = 1
	modeNowOnly = 2
)

// Refusal kinds (RefuseRequest.Kind): a refusal whose hint could not be
// read, one with a hint, and an operator's pause (Gate.Pause).
const (
	Hintless = 0
	Hinted   = 1
	Operator = 2
)

// RefuseRequest is a refusal, or an operator's pause (RefuseScript).
type RefuseRequest struct {
	Limits   []LimitSpec
	Pause    int64 // ms, clamped; without a hint, the cap of the hintless episode's pause
	MaxPause int64 // ms
	Kind     int   // Hintless, Hinted or Operator
	Prec     int64 // µs: the hint's precision
	Counts   int64 // admissions no script counted, reported first
	Age      int64 // µs: how long before the call the first of Counts was admitted
	Alt      int64 // ms: the hint read as milliseconds (0: not in question)
	Level    int64 // the refused request's level (Refusal.Level; 0 unknown)
	Mark     int64 // its admission's mark (Refusal.Mark; 0 none)
	Opens    int64 // µs: the refused request's answer id (Refusal.Opens; 0 none)
}

// Call returns the keys and arguments of RefuseScript for the scope of k.
func (r RefuseRequest) Call(k schema.Keys) ([]string, []any) {
	return limitArgs(k, r.Limits, []string{k.Pause, k.Learn, k.LearnWin, k.PauseBy, k.Fallback, k.LearnLog, k.Budget, k.Start, k.Flight, k.FlightConc},
		[]any{r.Pause, r.MaxPause, r.Kind, r.Prec, r.Counts, r.Age, r.Alt, r.Level, r.Opens, r.Mark})
}

// ObserveCall returns the keys and arguments of ObserveScript recording o
// for the scope of k, whose configured limits are ls.
func ObserveCall(k schema.Keys, o Observation, ls []LimitSpec) ([]string, []any) {
	return []string{k.Budget, k.Learn, k.Fallback, k.Start, k.Flight},
		[]any{o.Remaining, o.Reset, o.Limit, o.Prec, o.Seq, o.Opened, longestFixed(ls), boolArg(o.Refused), o.RTT, o.Alt, boolArg(o.Millis)}
}

// ReportCall returns the keys and arguments of ReportScript reporting n
// admissions no script counted of the scope of k, the first of them age
// µs before the call.
func ReportCall(k schema.Keys, n, age int64) ([]string, []any) {
	return []string{k.Learn}, []any{n, age}
}

// ReassertRequest is a remembered pause to re-assert (ReassertScript).
type ReassertRequest struct {
	UntilMs  int64 // the remembered deadline, Unix ms
	LeftMs   int64 // the time it has left by the gate's clock, ms (0: the deadline alone counts)
	SeenMs   int64 // the Redis TIME it was known in force at, ms
	MaxPause int64 // ms
	Operator bool  // an operator set it (Gate.Pause)
	SlackMs  int64 // ms: how much later the time left must end to move a deadline in force
}

// Call returns the keys and arguments of ReassertScript for the scope of k.
func (r ReassertRequest) Call(k schema.Keys) ([]string, []any) {
	return []string{k.Pause, k.PauseBy, k.Resumed}, []any{r.UntilMs, r.LeftMs, r.SeenMs, r.MaxPause, boolArg(r.Operator), r.SlackMs}
}

// ReleaseCall returns the keys and arguments of ReleaseScript ending the
// lease id of cost: on the concurrency limits among ls, or, with none
// configured, on the learned one (whose admission answered Leased);
// answered tells that its request was not refused. No keys when there is
// nothing to release.
func ReleaseCall(k schema.Keys, ls []LimitSpec, id string, cost int64, answered bool) ([]string, []any) {
	ks := []string{k.Flight, k.FlightConc}
	for i, l := range ls {
		if l.concurrent {
			ks = append(ks, k.Limit(i, l.kind()))
		}
	}
	if len(ls) > 0 && len(ks) == 2 || id == "" {
		return nil, nil
	}
	return ks, []any{lease{id: id, cost: max(cost, 1)}.member(), boolArg(answered), len(ls)}
}

// ResumeCall returns the keys and arguments of ResumeScript for the scope
// of k: every record that may hold it back, and the
// state of every limit it may have, of every kind at every index below
// schema.MaxLimits, whichever gate configured it.
func ResumeCall(k schema.Keys, maxPause int64) ([]string, []any) {
	del := []string{k.Resumed, k.Pause, k.PauseBy, k.Line, k.ILine, k.Class, k.Budget, k.LearnWin, k.LearnLog, k.Fallback, k.Start, k.Flight, k.FlightConc}
	for i := range schema.MaxLimits {
		for _, kind := range schema.LimitKinds {
			del = append(del, k.Limit(i, kind))
		}
	}
	return del, []any{maxPause}
}

// limitArgs appends the keys and arguments of the configured limits ls.
func limitArgs(k schema.Keys, ls []LimitSpec, ks []string, args []any) ([]string, []any) {
	args = append(args, len(ls))
	for i, sp := range ls {
		ks = append(ks, k.Limit(i, sp.kind()))
		args = append(args, int(sp.kind()), sp.per, sp.n)
	}
	return ks, args
}

// longestFixed is the longest fixed window of ls, µs (0: none), as
// Params.longestWindow has it.
func longestFixed(ls []LimitSpec) int64 {
	w := int64(0)
	for _, sp := range ls {
		if sp.fixed && sp.per > 0 && sp.n > 0 {
			w = max(w, sp.per)
		}
	}
	return w
}

// The flags: a boolean as a script argument, a field of a record or a
// reply's field (C.flagOn, C.flagOff in the scripts).
const (
	flagOff = 0
	flagOn  = 1
)

// boolArg is b as a script argument: flagOn or flagOff.
func boolArg(b bool) int {
	if b {
		return flagOn
	}
	return flagOff
}

// AdmitDecision is the decision of AdmitScript's named reply (its integer
// fields v, see NamedReply: every field of the admission's reply is an
// integer), and the Redis TIME of it, Unix µs.
func AdmitDecision(v map[string]int64) (d Decision, now int64) {
	return Decision{Code: v["code"], Reason: Reason(v["reason"]), Wait: v["wait"], Until: v["deadline"], Reopen: v["reopen"],
		Probe: v["probe"] == flagOn, Opens: v["opens"], Seq: v["seq"], ByOp: v["byOp"] == flagOn, Spread: v["spread"] == flagOn,
		Unreserved: v["unreserved"] == flagOn, Limited: v["limited"] == flagOn, Cache: v["cache"] == flagOn,
		Leased: v["leased"] == flagOn, Level: v["level"], Mark: v["mark"], Slots: v["slots"] == flagOn}, v["now"]
}
