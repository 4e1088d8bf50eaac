package redistest

import (
	"syscall"
	"testing"
)

// Faults: a test that owns its server (StartPrivate) may kill it, restart it
// on the same port with the same configuration, or suspend it (SIGSTOP: it
// keeps its connections open and answers nothing, like a hung host) and
// resume it (SIGCONT). The shared server of [Main] is never a target: other
// tests run on it.

// StartPrivate returns a redis-server of the test's own, even under [Main],
// stopped by tb.Cleanup: the one server a test may inject faults into. It
// skips or fails like [Start] when redis-server is missing.
func StartPrivate(tb testing.TB) *Server {
	tb.Helper()
	s := startOwn(tb, lookPath(tb, Binary))
	s.private = true
	return s
}

// Kill ends the server with SIGKILL (kill -9) and waits until it has exited:
// its connections break and, without persistence, its data is gone.
func (s *Server) Kill(tb testing.TB) {
	tb.Helper()
	s.mustOwn(tb, "Kill")
	s.current().kill()
}

// Restart starts the server again on the same port with the same
// configuration, killing it first if it still runs, and waits until it
// answers (and is ours).
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.mustOwn(tb, "Restart")
	if p := s.current(); !p.exited() {
		p.kill()
	}
	if _, err := s.start(); err != nil {
		tb.Fatalf("redistest: restarting %s on %s: %v", Binary, s.Addr, err)
	}
}

// Suspend stops the server process with SIGSTOP: connections stay open,
// commands get no answer until Resume.
func (s *Server) Suspend(tb testing.TB) {
	tb.Helper()
	s.signal(tb, "Suspend", syscall.SIGSTOP)
}

// Resume continues a suspended server (SIGCONT).
func (s *Server) Resume(tb testing.TB) {
	tb.Helper()
	s.signal(tb, "Resume", syscall.SIGCONT)
}

func (s *Server) signal(tb testing.TB, op string, sig syscall.Signal) {
	tb.Helper()
	s.mustOwn(tb, op)
	p := s.current()
	if p.exited() {
		tb.Fatalf("redistest: %s: %s on %s has exited", op, Binary, s.Addr)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		tb.Fatalf("redistest: %s: %v", op, err)
	}
}

// mustOwn fails the test unless s came from StartPrivate.
func (s *Server) mustOwn(tb testing.TB, op string) {
	tb.Helper()
	if !s.private {
		tb.Fatalf("redistest: %s on %s: faults are only for a server of the test's own (StartPrivate)", op, s.Addr)
	}
}
