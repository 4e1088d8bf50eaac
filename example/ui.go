package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/hibiken/asynq"
	"github.com/hibiken/asynqmon"
)

// serveUI serves asynqmon on addr for the Redis of the run. Each mode has its
// own queue (local, gate, gate+limit): open a queue's Retry tab while it runs
// to watch the deferred polls, and read why each one waits in its last error,
// the gate's Deferral message ("acme/fp:… is paused by the provider for …,
// until …; deferred (handler not run)").
func serveUI(addr string, opt asynq.RedisConnOpt, stderr io.Writer) (stop func(), err error) {
	h := asynqmon.New(asynqmon.Options{RootPath: "/", RedisConnOpt: opt})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("-ui: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	fmt.Fprintf(stderr, "asynqmon: http://%s/\n", ln.Addr())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		h.Close()
	}, nil
}
