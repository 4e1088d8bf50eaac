// Package feed is how every gate's process learns of every scope that
// waits, at a cost to Redis that grows with processes × groups per
// interval, not with processes × pauses.
//
// # The log and the snapshot
//
// The scopes are spread over schema.FeedGroups groups by their pause key
// (schema.FeedGroup). Each group has two keys under one hash tag
// (schema.FeedKeys), so a Cluster spreads the groups over its masters:
//
//   - its log, a stream of entries: a scope paused until a deadline, a
//     scope resumed, or a scope that gained state its admissions must ask
//     Redis about (a budget advertised). An entry is one field, a line
//     (entry.go), since XREAD builds every field of every entry for every
//     reader. Entries are kept for Retain, trimmed by their ID's time
//     (XADD MINID), so a log holds what a minute of pauses wrote, however
//     long the pauses are;
//   - its snapshot, a sorted set of the pause keys waiting, scored by
//     their deadline (Unix ms of Redis TIME), only ever raised, the
//     scopes resumed or past their deadline removed;
//   - its asks, a sorted set of every pause key an entry named within
//     AskRetain, scored by the last entry's time: the scopes whose
//     admissions may have to ask Redis. A process that starts, or catches
//     up after a gap, asks Redis about those, and admits any other scope
//     with nothing configured without a round trip (local.OpenCache).
//
// A gate's store appends an entry after each script that changes what the
// scope tells other gates (Append: a refusal, a re-asserted pause, a
// Resume, a first budget): one more call on those rare paths, none on an
// admission's. Every script that can make a scope's admissions depend on
// its records begins with one of those, so a scope no entry named within
// AskRetain has nothing in Redis but what a pause would stop.
//
// # The reader
//
// Each process reads the feed with one Reader, every Interval: one XREAD
// of the log from the last entry it read on a single node, which has one
// group (Groups); one XREAD per group, pipelined, one round trip per
// master, on a Cluster, where a command may not read keys of several
// slots and the 16 groups spread the reads over the masters. Redis does
// work per reader and interval, whatever the number of pauses: a poll
// that finds nothing costs it a microsecond or less, and the entries a
// poll finds are the pauses of one interval, built once per reader.
//
// The reader is fresh while its last poll that succeeded began within
// twice the interval (Fresh): a gate trusts what it knows of a scope
// without asking Redis only then (local.OpenCache), so a pause recorded
// anywhere stops every gate within about two intervals, or sends its
// admissions to Redis. A poll that fails makes the reader stale at once
// (Reset(false)); the reader then reloads the snapshot, and reads the logs
// from the IDs the snapshot was taken at (Reset(true)): no entry of the
// gap is lost, and none is needed, since a pause the snapshot holds is
// heard from it, and every scope the gap's entries named is in its asks. A reader that could not read for Retain/2
// (its logs may have been trimmed past what it read), or whose store
// recovered from a failure (Resync: a new master may have lost entries
// it read) reloads the snapshot too. A snapshot that ends a gap is
// trusted only Settle after it: a failover may have refused or lost the
// entries of pauses recorded around it, which their writers append again
// once Redis answers them, and until then no snapshot holds them.
//
// # What it does not cover
//
// The entry is written by a second call after the script that changed
// the scope, not in it: a Cluster's script may not write the key of
// another slot. A process that dies between the two leaves the pause in
// force in Redis, where every admission that asks finds it, and
// unannounced to the gates that trust the scope open until a request one
// of them sends into it is refused (every refusal of a paused scope is
// announced): a gate that saw the scope open trusts it for at most its
// open cache's age (Tuning.OpenCache), one that never asked about it
// until that refusal. An operator's pause so lost, with no refusal to
// follow, goes unheard by the latter. A failover may lose entries with
// the writes they announce; the gates' failover memory re-asserts the
// pauses it knew, and appends them again.
package feed
