// Package failover is what a gate's process remembers of the pauses in
// force, and their re-assertion: the bounded promise of a pause through a
// failover. It sits above internal/store, whose scripts it runs, and
// below quotagate, whose Gate holds one Memory.
//
// # Why
//
// Redis replicates asynchronously. A master that dies after it answered a
// refusal script, before its replica had the write, takes the pause with
// it: the promoted replica has no deadline for the scope, or an earlier
// one, and admits requests into a window the provider closed.
// Config.Durable closes that gap at the price of a WAIT per pause;
// without it, the default, the gates close it themselves.
//
// # What a process remembers
//
// A Memory holds the pauses in force that its gate recorded, that it heard
// on the feed (internal/feed: every pause is announced there with its
// deadline and the Redis TIME it was set at, and loaded from its snapshot
// at start and after a gap: Heard), and that its admissions read, each
// as a Remembered: the absolute deadline in ms of Redis TIME, a Redis TIME
// it was known in force at, and when it ends by this process's monotonic
// clock (the instant the answer arrived plus the remaining time it stated:
// never earlier than the true end, later by at most the answer's transit,
// and for a pause heard on the feed by the time it waited in the log, at
// most the feed's interval). At most maxRemembered of them, the
// earliest-ending evicted first; an entry is dropped when it ends, or
// when the scope is resumed.
//
// # When it re-asserts
//
//   - After an admission whose answer says that a remembered deadline is
//     absent or earlier (Remembered.LostFrom, a pure decision): Recheck
//     re-asserts it before anything is sent, with the monotonic pause
//     transition (never moving a deadline earlier, idempotent), and the
//     gate asks again, so the task is deferred as any task of a paused
//     scope.
//   - After a store failure recovers, or after a failover: when the store
//     answers again after failing, or the feed catches up after a gap
//     (a master changed, in most failovers), the gate calls Recovered, and the memory re-asserts what
//     a new master may have lost (ReassertLost), at most once per
//     reassertGap: it reads the identity of each master of the remembered
//     pauses (store.Identity: its run_id and replication ID, one call per
//     master) and re-asserts the pauses not known to be on a master of
//     that identity, one round trip per pause, whether or not a task of
//     its scope comes by. A pause is known to be on a master when the
//     memory had read that master's identity before it remembered the
//     pause, or re-asserted it there. So a timeout or a failed
//     poll of the feed on a master that stayed costs a gate one call per
//     master, whatever it remembers; a new master, a script per pause it
//     may have lost, once. A master that does not tell its identity (INFO
//     refused to the user, a Ring, miniredis) has every remembered pause
//     re-asserted at every recovery. (A pause heard announced only after
//     its master's whole failover, with the new master's identity already
//     read, passes for one the new master holds: the feed is read every
//     interval, a promotion takes seconds.)
//   - While pauses are remembered, one of their masters is probed every
//     ProbeEvery, in turn (a PING, or the read of its identity while the
//     memory does not know it): one round trip per gate per interval, so
//     that an idle gate notices a promotion too.
//   - While the store fails, the gate defers a task of a scope it knows
//     paused (Memory.Get) until the pause ends, instead of failing open.
//   - A failed master may lose a feed group's last entries while the
//     pauses they announced, whose keys are on other masters, stand: no
//     re-assertion would move them, and a gate that trusts a scope open
//     from its cache would not hear them. So after a gap, once the feed's
//     snapshot is loaded (it names every pause its groups keep), every
//     remembered pause in force that the feed has not named since the
//     snapshot's poll began is re-asserted and announced again by the
//     recovery's run of ReassertLost, whatever its master (Reannounce):
//     one script per pause the feed lost, by each gate that remembers it.
//
// # The new master's clock
//
// A deadline is an absolute instant of the clock of the master that set
// it, and after a promotion it is compared with the new master's TIME: a
// new master whose clock runs s ahead ends every pause in force s early,
// one that runs s behind ends it s late. Re-assertion proposes the later
// of the remembered deadline and the new master's TIME plus the remaining
// time as this process measured it, so a gate that knew a pause restores
// its true end on a clock that runs ahead (the relative test of LostFrom:
// a scope the new master releases more than the slack, StoreTimeout,
// before this gate's end is re-asserted); a clock that runs behind
// lengthens the pause by s, which no monotonic pause can undo. Both apply
// only to a pause remembered before the store last changed (an epoch):
// within one master's life, the deadlines alone count.
//
// # Resume
//
// Gate.Resume records when it lifted the scope (the scope's resumed key,
// for MaxPause) and announces it on the feed; a Memory forgets the scope when it hears
// that, and the re-assertion script re-asserts nothing known in force only
// before the last resume, so neither a late answer nor a missed
// announcement undoes an operator's Resume.
//
// # Time
//
// Every decision takes this process's clock as a parameter or through
// Config.Now (the gate's clock, which its tests replace); Redis TIME comes
// from the answers. Only the waits between runs and probes are real
// timers. Of the project's packages it imports internal/store,
// internal/feed and internal/model only.
package failover
