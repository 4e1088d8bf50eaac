// Package inspect serves a page that shows which scopes a quotagate Gate
// holds paused, until when and how far their limit is spent: HTML for people
// (refreshing itself), JSON for scripts. It is read-only unless the user
// enables the pause and resume actions.
//
// Mount it under a path of its own, beside asynqmon for instance:
//
//	mux.Handle("/quotagate/", http.StripPrefix("/quotagate", inspect.Handler(g, inspect.Options{})))
//
// With several gates, give each page a name and a link back to the page
// that lists them (Options.Name, Options.Index):
//
//	inspect.Handler(g, inspect.Options{Name: "billing", Index: "../"}) // at /quotagate/billing/
//
// Routes, relative to where it is mounted:
//
//	GET  /          the page; JSON with "Accept: application/json" or ?format=json
//	POST /resume    provider, account: lift a pause   (Options.Actions only)
//	POST /pause     provider, account, duration: pause a scope, monotonic (Options.Actions only)
//
// The actions answer 403 Forbidden unless Options.Actions is set, take form
// fields, and refuse cross-origin browser requests (http.CrossOriginProtection:
// Sec-Fetch-Site and Origin), so another site cannot make an operator's
// browser lift a pause. A browser is sent back to the page (303); a client
// that accepts JSON gets the scope's state.
//
// The page shows accounts: they are identities or credential fingerprints
// (quotagate.Fingerprint), never secrets, and an operator needs them to act.
// Protect the page as you protect asynqmon.
package inspect

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/quotagate/quotagate"
)

// Options configures the handler. The zero value is a read-only page that
// refreshes every 2 seconds.
type Options struct {
	// Actions enables the pause and resume buttons and their POST routes.
	// Default false: read-only, POSTs answer 403.
	Actions bool

	// Refresh is how often the page reloads itself, rounded to whole
	// seconds (at least 1). Default 2 seconds: pauses last from a second
	// to hours, so the page tracks the short ones without loading Redis
	// (one SCAN and a round trip per pause). Negative: never.
	Refresh time.Duration

	// Timeout bounds the Redis calls of one request. Default 5 seconds.
	Timeout time.Duration

	// Name names the gate on the page (title and heading) and in the JSON,
	// e.g. the service or the mode it guards, when several gates have
	// pages. Default "": the page is "quotagate" alone.
	Name string

	// Index is the URL of the page that lists this one among others, which
	// the page links back to: "../" for pages mounted side by side under
	// one index (/quotagate/NAME/ beside /quotagate/), or asynqmon's "/".
	// Resolved against the page's own URL, which ends in "/". Default "":
	// no link.
	Index string
}

// MaxManualPause is the longest pause the page records: the workers' default
// quotagate.Config.MaxPause, past which a worker reads a deadline as
// malformed (open).
const MaxManualPause = 12 * time.Hour

// Handler returns the inspector of g.
func Handler(g *quotagate.Gate, opts Options) http.Handler {
	if opts.Refresh == 0 {
		opts.Refresh = 2 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	h := &handler{g: g, opts: opts}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", h.page)
	mux.HandleFunc("POST /resume", h.action(false))
	mux.HandleFunc("POST /pause", h.action(true))
	return http.NewCrossOriginProtection().Handler(mux)
}

type handler struct {
	g    *quotagate.Gate
	opts Options
}

// view is what the template renders.
type view struct {
	Name    string
	Index   string
	Pauses  []row
	Error   string
	Notice  string
	Actions bool
	Refresh int // seconds; 0: no refresh
	Read    string
	Max     string
}

type row struct {
	Provider, Account, Until, Remaining, Reason, Backlog string
	InFlight                                             string // the learned concurrency limit, "-" none
}

//go:embed page.html
var pageHTML string

var pageTemplate = template.Must(template.New("page").Parse(pageHTML))

// wantsJSON reports whether the client asked for JSON.
func wantsJSON(r *http.Request) bool {
	return r.URL.Query().Get("format") == "json" || strings.Contains(r.Header.Get("Accept"), "application/json")
}

func (h *handler) page(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.Timeout)
	defer cancel()
	ps, err := h.g.Pauses(ctx)
	status := http.StatusOK
	if err != nil && !errors.Is(err, quotagate.ErrTruncated) {
		status = http.StatusServiceUnavailable
	}
	w.Header().Set("Cache-Control", "no-store")
	if wantsJSON(r) {
		body := struct {
			Name    string            `json:"name,omitempty"`
			Pauses  []quotagate.Pause `json:"pauses"`
			Actions bool              `json:"actions"`
			Error   string            `json:"error,omitempty"`
		}{Name: h.opts.Name, Pauses: ps, Actions: h.opts.Actions}
		if body.Pauses == nil {
			body.Pauses = []quotagate.Pause{}
		}
		if err != nil {
			body.Error = err.Error()
		}
		writeJSON(w, status, body)
		return
	}
	v := view{Name: h.opts.Name, Index: h.opts.Index, Actions: h.opts.Actions, Read: time.Now().UTC().Format(time.RFC3339), Max: MaxManualPause.String(), Notice: r.URL.Query().Get("done")}
	if h.opts.Refresh > 0 {
		v.Refresh = max(1, int(math.Round(h.opts.Refresh.Seconds())))
	}
	if err != nil {
		v.Error = err.Error()
	}
	for _, p := range ps {
		v.Pauses = append(v.Pauses, row{
			Provider:  p.Scope.Provider,
			Account:   p.Scope.Account,
			Until:     p.Until.UTC().Format(quotagate.RFC3339Milli),
			Remaining: p.Remaining.Round(time.Millisecond).String(),
			Reason:    p.Reason.String(),
			Backlog:   backlog(p.LimitBacklog),
			InFlight:  inFlight(p.LearnedInFlight),
		})
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	pageTemplate.Execute(w, v)
}

// inFlight is a learned concurrency limit as a cell: "-" when none.
func inFlight(n int) string {
	if n <= 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

func backlog(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}

// action returns the handler of POST /pause (pause true) or /resume.
func (h *handler) action(pause bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { h.act(w, r, pause) }
}

func (h *handler) act(w http.ResponseWriter, r *http.Request, pause bool) {
	if !h.opts.Actions {
		http.Error(w, "quotagate inspect: actions are disabled (inspect.Options.Actions)", http.StatusForbidden)
		return
	}
	s := quotagate.Scope{Provider: r.PostFormValue("provider"), Account: r.PostFormValue("account")}
	if err := s.Validate(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.Timeout)
	defer cancel()
	var (
		p    quotagate.Pause
		err  error
		done string
	)
	if pause {
		d, perr := time.ParseDuration(r.PostFormValue("duration"))
		if perr != nil || d < quotagate.MinPause || d > MaxManualPause {
			http.Error(w, fmt.Sprintf("duration %q: want %v to %v (e.g. 90s, 10m)", r.PostFormValue("duration"), quotagate.MinPause, MaxManualPause), http.StatusBadRequest)
			return
		}
		p, err = h.g.Pause(ctx, s, d)
		done = "paused " + s.String()
	} else {
		if err = h.g.Resume(ctx, s); err == nil {
			p, err = h.g.State(ctx, s)
		}
		done = "resumed " + s.String()
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	if wantsJSON(r) {
		writeJSON(w, http.StatusOK, p)
		return
	}
	// Relative to the action's URL, so it works wherever the page is
	// mounted (http.Redirect would resolve it against the stripped path).
	w.Header().Set("Location", "./?done="+url.QueryEscape(done))
	w.WriteHeader(http.StatusSeeOther)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	e.Encode(v)
}
