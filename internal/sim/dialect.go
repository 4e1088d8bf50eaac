package sim

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// Reply is what a dialect speaks about: one request's decision and the
// quota's state just after it.
type Reply struct {
	Now      time.Time // the request's arrival
	Decision Decision
	State    State
}

// A Dialect is how a provider speaks about its quota: the headers it sends
// on every response, and the status, headers and body of a refusal. Its
// functions are pure: the same Reply writes the same answer.
type Dialect struct {
	// Name is the dialect's name in flags and tables.
	Name string
	// Doc says in a line what it sends and who sends it so.
	Doc string
	// Whole makes its hints the quota's whole window instead of the exact
	// wait (see Hint).
	Whole bool
	// States reports that its refusals state a wait (Hint).
	States bool
	// headers writes what every response carries; nil: nothing.
	headers func(h http.Header, r Reply)
	// refuse writes a refusal's own headers and returns its status and
	// body; nil: 429 with plainBody.
	refuse func(d Dialect, h http.Header, r Reply) (int, []byte)
}

// Write writes r's answer in d: its headers into h, and returns the status
// and, for a refusal, the body (nil for an accepted request: the server
// writes its own).
func (d Dialect) Write(h http.Header, r Reply) (status int, body []byte) {
	if d.headers != nil {
		d.headers(h, r)
	}
	if r.Decision.OK {
		return http.StatusOK, nil
	}
	if d.refuse == nil {
		return http.StatusTooManyRequests, plainBody()
	}
	return d.refuse(d, h, r)
}

// Hint is the wait a refusal announces: the exact wait, or with Whole the
// quota's whole window (a safe upper bound, as go-chi/httprate's
// Retry-After; go-chi/httprate#47); when neither is known (a concurrency
// limit), a second.
func (d Dialect) Hint(r Reply) time.Duration {
	w := r.Decision.Wait
	if d.Whole && r.State.Window > 0 {
		w = r.State.Window
	}
	if w <= 0 {
		w = time.Second
	}
	return w
}

// HintSeconds is Hint in whole seconds, rounded up, at least 1, as
// providers write it ("try again in 1 second").
func (d Dialect) HintSeconds(r Reply) int { return secondsUp(d.Hint(r)) }

// secondsUp is d in whole seconds, rounded up, at least 1.
func secondsUp(d time.Duration) int {
	return max(int((d+time.Second-1)/time.Second), 1)
}

// ceilSeconds is d in whole seconds rounded up; 0 for d ≤ 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// ceilMillis is d in whole milliseconds rounded up; 0 for d ≤ 0.
func ceilMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// epochCeil is the Unix second at or after t.
func epochCeil(t time.Time) int64 {
	s := t.Unix()
	if t.After(time.Unix(s, 0)) {
		s++
	}
	return s
}

// fraction is seconds with three decimals, rounded up to the millisecond,
// as Discord writes them ("0.640").
func fraction(d time.Duration) string {
	return strconv.FormatFloat(float64(ceilMillis(d))/1000, 'f', 3, 64)
}

// RefusalMessage is the prose of a refusal that states its wait.
func RefusalMessage(seconds int) string {
	unit := "seconds"
	if seconds == 1 {
		unit = "second"
	}
	return fmt.Sprintf("Rate limit exceeded. Please try again in %d %s.", seconds, unit)
}

// errorBody is the JSON error of the refusals that do not imitate a
// provider's own: {"error":{"code":"rate_limited","message":"..."}}.
type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// ErrorJSON is an error body {"error":{"code":code,"message":msg}}.
func ErrorJSON(code, msg string) []byte {
	var e errorBody
	e.Error.Code, e.Error.Message = code, msg
	return mustJSON(e)
}

// plainBody is a refusal that says nothing about when.
func plainBody() []byte { return ErrorJSON("rate_limited", "Rate limit exceeded.") }

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only fixed types are encoded
	}
	return append(b, '\n')
}

// roundMillis is x rounded to the millisecond, for JSON numbers.
func roundMillis(d time.Duration) float64 { return math.Round(float64(ceilMillis(d))) / 1000 }

// Announced is how long from its arrival a refusal in d tells its caller
// the quota stays closed: its hint in whole seconds when the refusal
// states one (States), else the exact wait, which its headers tell by a
// spent budget until their reset; 0 when it says
// nothing (none).
func (d Dialect) Announced(r Reply) time.Duration {
	switch {
	case r.Decision.OK:
		return 0
	case d.States:
		return time.Duration(d.HintSeconds(r)) * time.Second
	case d.headers != nil:
		return r.Decision.Wait // spent: remaining 0 until the reset
	}
	return 0
}
