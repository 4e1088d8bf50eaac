package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// serveCarrier serves the constrained carrier alone on addr (-serve-carrier),
// with the quota and -headers of the flags, so that another job queue can be
// measured against the same provider as the modes of this command. Besides
// the carrier's API it answers:
//
//	POST /control/restart  fresh quota and counters; the windows start on the
//	                       next whole second: {"start_unix_ms": ...}
//	GET  /control/stats    the counters: {"Requests": ..., "Accepted": ..., ...}
//
// It serves until ctx ends.
func serveCarrier(ctx context.Context, addr string, s settings, stdout io.Writer) error {
	c := makeCarrier(constrained, carrierOptions{quota: &s.quota, dialect: s.dialect, latency: s.latency}, time.Now, acmeCredential)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: controlled(c), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "carrier %s (%s per credential, dialect %s, latency %v) on http://%s\n", constrained, s.quota, s.dialect.Name, s.latency, ln.Addr())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	if err := srv.Shutdown(context.Background()); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// controlled is c's API with the control endpoints of serveCarrier.
func controlled(c *carrier) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/v1/", c.handler())
	mux.HandleFunc("POST /control/restart", func(w http.ResponseWriter, _ *http.Request) {
		start := c.now().Truncate(time.Second).Add(time.Second)
		c.restart(start)
		writeJSON(w, http.StatusOK, map[string]int64{"start_unix_ms": start.UnixMilli()})
	})
	mux.HandleFunc("GET /control/stats", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, c.snapshot())
	})
	return mux
}
