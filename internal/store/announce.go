package store

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/quotagate/quotagate/internal/feed"

	"github.com/redis/go-redis/v9"
)

// announce appends e to the feed (internal/feed) after the script whose
// change it tells the other gates. The change is in force in Redis, where
// every admission that asks finds it; but a gate that admits the scope
// without asking hears it only from the feed, so an append that fails (a
// Cluster's slot half moved answers TRYAGAIN; a failover) is tried again
// in the background (announceAgain) rather than dropped. An entry
// appended late is read like any other: its ID is later than what every
// reader read.
func (s *Store) announce(ctx context.Context, e feed.Entry) {
	if err := s.appendEntry(ctx, e); err != nil {
		s.retryAnnounce(e, err)
	}
}

// appendEntry is one bounded attempt to append e. With Config.Durable
// set it WAITs for as many replicas, as a pause does: a failover that
// loses an entry the master alone held leaves the pause it announces
// unheard by the gates that admit its scope without asking (the failover
// memory announces it again after the gap, but only once a gate that
// remembers it has caught up). An entry fewer replicas acknowledged is
// appended all the same: it is logged, not failed.
func (s *Store) appendEntry(ctx context.Context, e feed.Entry) error {
	_, err := bounded(ctx, s, "announce", func(ctx context.Context) (struct{}, error) {
		if s.durable <= 0 {
			return struct{}{}, feed.Append(ctx, s.rdb, s.prefix, e)
		}
		script, keys, args := feed.AppendCall(s.rdb, s.prefix, e)
		_, _, err := runDurably(ctx, s.rdb, keys[0], s.durable, max(s.timeout/2, time.Millisecond), script, keys, args...)
		if errors.Is(err, errNotReplicated) {
			s.warn("quotagate: a scope's change is announced but fewer replicas than Config.Durable acknowledged it", err)
			err = nil
		}
		return struct{}{}, err
	})
	return err
}

// Announcing again: the first retry after announceFirst, each next one
// twice as late, at most announceMax apart, for at most announceFor (the
// feed's Retain: a reader that has not caught up by then reloads the
// snapshot, which holds the pauses, and the scope's records expire
// within minutes of a silence anyway); at most announceQueued entries at
// once, beyond which one is dropped (an outage of the whole store, in
// which the scripts that changed the scopes fail too).
const (
	announceFirst  = 50 * time.Millisecond
	announceMax    = 2 * time.Second
	announceFor    = feed.Retain
	announceQueued = 1000
)

// announcing counts the entries being tried again, over every store.
var announcing atomic.Int32

// retryAnnounce tries e again in the background after its append failed
// with err, logging the failure once now and again if it is dropped.
func (s *Store) retryAnnounce(e feed.Entry, err error) {
	if errors.Is(err, redis.ErrClosed) {
		return
	}
	if announcing.Add(1) > announceQueued {
		announcing.Add(-1)
		s.warn("quotagate: a scope's change is in force but was not announced to the other gates", err)
		return
	}
	s.warn("quotagate: a scope's change is in force, its announcement to the other gates is tried again", err)
	asked := s.retrying() // now: an ask from here on counts
	go func() {
		defer announcing.Add(-1)
		if err := s.announceAgain(e, asked); err != nil {
			s.warn("quotagate: a scope's change is in force but was not announced to the other gates", err)
		}
	}()
}

// announceAgain appends e, trying again with a growing wait, or at once
// when RetryAnnouncements asks (asked: closed by the first ask since the
// failure), until it is appended, the client is closed, or announceFor
// passed.
func (s *Store) announceAgain(e feed.Entry, asked <-chan struct{}) error {
	deadline := time.Now().Add(announceFor)
	var err error
	for wait := s.retryFirst; time.Now().Before(deadline); wait = min(2*wait, max(announceMax, s.retryFirst)) {
		select {
		case <-time.After(wait):
		case <-asked:
		}
		asked = s.retrying() // before the attempt: an ask during it counts
		if err = s.appendEntry(context.Background(), e); err == nil || errors.Is(err, redis.ErrClosed) {
			return nil
		}
	}
	return err
}

// RetryAnnouncements has the announcements waiting to be tried again
// tried at once: Redis answers again (a call of the store did after
// failing, or the gate's feed caught up), so the master that refused
// them may be back or replaced, and a recorded pause whose announcement
// waits its turn (up to announceMax) is unheard by the gates that admit
// its scope without asking, now fresh again.
func (s *Store) RetryAnnouncements() {
	s.retryMu.Lock()
	defer s.retryMu.Unlock()
	if s.retry != nil {
		close(s.retry)
		s.retry = nil
	}
}

// retrying is closed at the next RetryAnnouncements.
func (s *Store) retrying() <-chan struct{} {
	s.retryMu.Lock()
	defer s.retryMu.Unlock()
	if s.retry == nil {
		s.retry = make(chan struct{})
	}
	return s.retry
}

// warn logs msg with err, when the store has a logger.
func (s *Store) warn(msg string, err error) {
	if s.log != nil {
		s.log.Warn(msg, "err", err)
	}
}
