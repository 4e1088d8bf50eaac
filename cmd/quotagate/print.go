package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/quotagate/quotagate"
)

// printer writes pauses as a table or as JSON.
type printer struct {
	w    io.Writer
	json bool
}

func (o printer) pauses(ps []quotagate.Pause) error {
	if o.json {
		if ps == nil {
			ps = []quotagate.Pause{} // [], not null
		}
		return o.encode(ps)
	}
	if len(ps) == 0 {
		_, err := fmt.Fprintln(o.w, "no pause in force")
		return err
	}
	tw := tabwriter.NewWriter(o.w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "PROVIDER\tACCOUNT\tUNTIL (UTC)\tREMAINING\tLIMIT BACKLOG")
	for _, p := range ps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", field(p.Scope.Provider), field(p.Scope.Account),
			p.Until.UTC().Format(quotagate.RFC3339Milli), p.Remaining.Round(time.Millisecond), backlog(p.LimitBacklog))
	}
	return tw.Flush()
}

func (o printer) state(p quotagate.Pause) error {
	if o.json {
		return o.encode(p)
	}
	var err error
	if p.Until.IsZero() {
		_, err = fmt.Fprintf(o.w, "%s is open", p.Scope)
	} else {
		_, err = fmt.Fprintf(o.w, "%s is paused until %s (%v left)", p.Scope,
			p.Until.UTC().Format(quotagate.RFC3339Milli), p.Remaining.Round(time.Millisecond))
	}
	if err == nil && p.LimitBacklog > 0 {
		_, err = fmt.Fprintf(o.w, "; limit backlog %v", backlog(p.LimitBacklog))
	}
	if err == nil && p.LearnedInFlight > 0 {
		_, err = fmt.Fprintf(o.w, "; learned %d in flight", p.LearnedInFlight)
	}
	if err == nil {
		_, err = fmt.Fprintln(o.w)
	}
	return err
}

func (o printer) encode(v any) error {
	e := json.NewEncoder(o.w)
	e.SetIndent("", "  ")
	return e.Encode(v)
}

// field quotes a table cell that would be ambiguous bare: empty, or with
// spaces or quotes in it.
func field(s string) string {
	if s == "" || strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || r == '"' }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

func backlog(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}
