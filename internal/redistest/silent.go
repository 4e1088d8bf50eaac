package redistest

import (
	"io"
	"net"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Silent and refusing servers: what a client meets when its Redis hangs
// (a host that accepts connections and never answers) or is gone (a port
// nobody listens on), without a redis-server at all.

// Hanging returns a client of a TCP server that accepts connections and
// never answers. The client has no timeouts of its own: only a caller's
// bound can end a call. The calls given up on stay blocked until release
// closes the server's side; the test's cleanup does it at the latest, and
// closes the client. opts, if any, adjust the client's options.
func Hanging(tb testing.TB, opts ...func(*redis.Options)) (rdb *redis.Client, release func()) {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go io.Copy(io.Discard, c)
		}
	}()
	o := &redis.Options{Addr: l.Addr().String(), ReadTimeout: -1, WriteTimeout: -1, MaxRetries: -1}
	for _, f := range opts {
		f(o)
	}
	rdb = redis.NewClient(o)
	tb.Cleanup(func() { release(); rdb.Close() })
	release = func() { // server side only: no lock shared with the client
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}
	return rdb, release
}

// Refusing returns a client of a loopback port nobody listens on, closed
// when the test ends. It dials once: go-redis's default five dial attempts
// 100ms apart outlast a small store timeout and run into the data race of
// internal/store's TestStoreRunTimeoutRace.
func Refusing(tb testing.TB) *redis.Client {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	tb.Cleanup(func() { rdb.Close() })
	return rdb
}
