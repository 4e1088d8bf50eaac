package main

import (
	"context"
	"fmt"
	"html/template"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynqmon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/quotagate/quotagate"
	"github.com/quotagate/quotagate/inspect"
)

// serveUI serves, on addr, for the Redis of the run:
//
//	/                    asynqmon. Each mode has its own queue (local, gate,
//	                     gate+limit): open a queue's Retry tab while it runs
//	                     to watch the deferred polls, and read why each one
//	                     waits in its last error, the gate's Deferral message
//	                     ("acme/fp:… is paused by the provider until …").
//	/quotagate/MODE/     the inspector of a gated mode's gate (package
//	                     inspect): which scopes are paused, until when, with
//	                     Resume buttons (the demo's keys are its own, so its
//	                     actions are enabled)
//	/metrics             the gates' Prometheus metrics, labelled mode="…"
//
// It hooks into e, so that every gate a mode creates shows up.
func serveUI(addr string, e *env, stderr io.Writer) (stop func(), err error) {
	u, err := startUI(addr, e)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stderr, "asynqmon: http://%s/  inspector: http://%s/quotagate/  metrics: http://%s/metrics\n", u.addr, u.addr, u.addr)
	return u.stop, nil
}

// ui is the running -ui server.
type ui struct {
	addr string // host:port it listens on
	stop func()

	reg     *prometheus.Registry // the gates' metrics, nothing else
	actions bool                 // inspector pause/resume buttons

	mu         sync.Mutex
	modes      []string                        // gated modes in the order they started
	gates      map[string]http.Handler         // mode name → its inspector
	collectors map[string]prometheus.Collector // mode name → its gate's metrics
}

func startUI(addr string, e *env) (*ui, error) {
	u := &ui{reg: prometheus.NewRegistry(), actions: true, gates: map[string]http.Handler{}, collectors: map[string]prometheus.Collector{}}
	mon := asynqmon.New(asynqmon.Options{RootPath: "/", RedisConnOpt: e.opt})
	mux := http.NewServeMux()
	mux.Handle("/", mon)
	mux.Handle("/quotagate/", http.HandlerFunc(u.inspector))
	mux.Handle("/metrics", promhttp.HandlerFor(u.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		mon.Close()
		return nil, fmt.Errorf("-ui: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	u.addr = ln.Addr().String()
	u.stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		mon.Close()
	}
	e.onGate = u.addGate
	return u, nil
}

// addGate shows a mode's gate on the page and in /metrics.
func (u *ui) addGate(m mode, g *quotagate.Gate) {
	u.mu.Lock()
	defer u.mu.Unlock()
	reg := prometheus.WrapRegistererWith(prometheus.Labels{"mode": m.Name}, u.reg)
	if old, again := u.collectors[m.Name]; again { // the mode's newest gate wins
		reg.Unregister(old)
	} else {
		u.modes = append(u.modes, m.Name)
	}
	u.collectors[m.Name] = g.Collector()
	reg.MustRegister(u.collectors[m.Name]) // only fails on a programming error: names are unique per mode
	u.gates[m.Name] = http.StripPrefix("/quotagate/"+m.Name, inspect.Handler(g, inspect.Options{Actions: u.actions, Name: m.Name, Index: "../"}))
}

var indexPage = template.Must(template.New("index").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="2"><title>quotagate demo</title></head>
<body style="font: 14px system-ui, sans-serif; margin: 2em">
<h1 style="font-size: 1.3em">quotagate: the gates of this run</h1>
{{if .}}<ul>{{range .}}<li><a href="{{.}}/">{{.}}</a></li>{{end}}</ul>{{else}}<p>No gated mode has started yet.</p>{{end}}
<p><a href="../">asynqmon</a> · <a href="../metrics">metrics</a></p>
</body></html>
`))

// inspector serves /quotagate/: an index of the gated modes, and each
// mode's inspector under /quotagate/MODE/.
func (u *ui) inspector(w http.ResponseWriter, r *http.Request) {
	name, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/quotagate/"), "/")
	u.mu.Lock()
	modes := slices.Clone(u.modes)
	h := u.gates[name]
	u.mu.Unlock()
	switch {
	case r.URL.Path == "/quotagate/":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		indexPage.Execute(w, modes)
	case h == nil:
		http.NotFound(w, r)
	case r.URL.Path == "/quotagate/"+name:
		to := *r.URL
		to.Path += "/"
		http.Redirect(w, r, to.String(), http.StatusMovedPermanently)
	default:
		h.ServeHTTP(w, r)
	}
}
