// Package store runs the admission model's scripts against Redis: it is
// the gate's storage layer, below the public API of quotagate and above
// the model.
//
// It owns
//
//   - the round trips: each transition of a scope (admit, refuse, observe,
//     release, resume, re-assert) as one call of its script
//     (internal/model), on Redis TIME, with the script's KEYS and ARGV
//     built by the model's calls and its named reply decoded into values;
//   - the bound on every call (Config.Timeout, ErrTimeout), with a
//     watchdog for clients that ignore context deadlines and a cap on the
//     calls left running while Redis fails (maxRunning);
//   - durable writes: a pause WAITed for on the master that ran it
//     (durable.go, Config.Durable);
//   - the cluster topology: a client's layout reloaded when a call fails as
//     a moved or dead master would make it fail, the masters of keys
//     pinged, and the keyspace scanned on every master (topology.go).
//
// Its boundary is values: limits as model.LimitSpec, classes as
// model.Class, keys as schema.Keys, instants as Unix µs (a deadline in
// ms, as it is stored) or time.Time, and the hooks the gate gives it
// (Hooks) are functions of strings, instants and errors. What a user
// reads (Pause, Budget, Limit) is built by quotagate from the values this
// package returns. It imports internal/model and internal/schema only, of
// the project's packages.
package store
