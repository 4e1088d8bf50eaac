// Package quotagate makes a provider's rate limit belong to every asynq
// worker that shares it.
//
// # The scope of a quota
//
// A rate limit applies to a shared identity: an API credential, an account,
// a tenant, an endpoint family. Every worker using that identity spends the
// same remote capacity. A Scope names it: Provider plus Account, where the
// account is an identity that is not itself a secret, or Fingerprint of a
// credential. Job uniqueness (one worker per tracking number) is a
// different scope and stays in asynq (TaskID, Unique); all the tracking
// numbers polled with one credential share one Scope. NewTask puts the scope
// in a task's headers; ScopeOf reads it back.
//
// # A refusal becomes a shared deadline
//
// When one task gets a 429 "try again in 15 seconds", the provider has told
// the whole scope to stop, not that task. The handler returns a Refusal
// with the provider's hint (package hint reads Retry-After, vendor headers,
// JSON fields and prose), and the gate stores it in Redis as an absolute
// deadline, paused_until = now + hint, computed from Redis TIME, expiring at
// that same instant. The update is an atomic maximum, so a shorter hint
// recorded after a longer one never shortens the pause. A missing, expired
// or malformed record means open: availability over strict protection.
//
// # Peers are deferred without running
//
// The Middleware asks Redis before the handler runs, in one round trip: is
// the scope paused, and does its Limit have capacity? While a peer's refusal
// is in force the handler does not run, so no client is resolved and no
// request is sent: the task returns a Deferral, which is not a failure
// (IsFailure), and comes back when the pause ends. Other providers and
// other credentials go on. Transport applies the same gate to HTTP requests
// and records the refusals it sees.
//
// # How long a task waits
//
// RetryDelay schedules the task: a deferral waits until the deadline; a
// refused task waits the longer of its own hint and the shared pause. A
// refusal whose hint cannot be read is no permission to retry immediately:
// it pauses the scope for its hintless episode, a second, then twice as
// long each time the provider refuses the one request, the probe, that
// asks again after the pause, up to Config.FallbackPause, 12 hours (with
// nothing configured, the scope then goes at the pace it was seen to get
// accepted), and the refused task waits that pause.
//
// The reference article's fallback is the task's own: 15 minutes, 30, 1
// hour, ... 12 hours by attempt. Every waiting task keeps its own schedule
// and asks when it ends, so twenty tasks send up to 140 requests in a day
// of refusals, the first only after 15 minutes. The episode is the
// scope's: one probe per pause whatever the fleet, the first after a
// second, so a short window is found at once, and 17 requests in the day
// from the first refusal. The task's own schedule is left for when the
// pause could not be recorded. NewTask reserves one retry so that a
// deferral on a task's last attempt is never archived; a refusal spends
// one (see Refusal). A pause may last 12 hours: bound a task's attempts
// with asynq.Timeout, not asynq.Deadline (a task deferred past its
// deadline fails), and make it unique with asynq.TaskID, not
// asynq.Unique, whose lock may expire during a pause.
//
// # A limit is a different question
//
// The pause reacts to a refusal: has the provider told this scope to stop
// until a deadline? A Limit models a known budget: may this request spend
// capacity now? With a limit configured, the gate paces the scope before
// the first 429; both are checked in the same round trip.
//
// # Work somebody waits for goes first
//
// Tasks of one scope are Background (a sweep) or Interactive (a poll a
// person triggered: NewTask's Interactive option, or a queue in
// Config.InteractiveQueues). While interactive work asks, background work
// leaves Config.Reserve of every capacity of the scope unspent, so the
// person's poll finds capacity at once; see Class.
//
// # Quick start
//
//	g := quotagate.New(rdb, quotagate.Config{})
//	defer g.Close() // stops the gate's reads of the feed of pauses
//	srv := asynq.NewServer(redisOpt, asynq.Config{
//		IsFailure:                quotagate.IsFailure,
//		RetryDelayFunc:           g.RetryDelay(nil),
//		DelayedTaskCheckInterval: 500 * time.Millisecond, // below Tuning.MaxHold: reopen on time
//	})
//	mux := asynq.NewServeMux()
//	mux.Use(g.Middleware())
//	mux.HandleFunc("tracking:poll", func(ctx context.Context, t *asynq.Task) error {
//		client := &http.Client{Transport: g.Transport(nil)}
//		resp, err := client.Do(request.WithContext(ctx)) // deferred while paused
//		...
//		if hint.IsRefusal(resp) { // 429, GitHub's 403s, 503 with Retry-After
//			wait, _ := hint.From(resp, body)
//			return &quotagate.Refusal{Hint: wait}
//		}
//		...
//	})
//	client.Enqueue(quotagate.NewTask("tracking:poll", payload,
//		quotagate.Scope{Provider: "ups", Account: quotagate.Fingerprint(apiKey)},
//		asynq.TaskID("poll:ups:1Z999")))
//
// Every deadline lives in Redis under <prefix>:{<provider>:<account>}:...,
// one hash tag per scope, so the gate runs on a single Redis or a Redis
// Cluster alike.
//
// # Where each idea lives
//
// This package is the API a user reads: Scope (provider.go), NewTask and
// ScopeOf (task.go), Refusal, Deferral and IsFailure (refusal.go),
// Middleware (middleware.go), RetryDelay (retrydelay.go), Transport
// (transport.go), Limit (limit.go), Class (class.go), Gate with State,
// Pauses, Pause, Resume and Close (gate.go, pauses.go) and Collector
// (metrics.go), with the admission loop that acts on the decision
// (middleware.go, admission.go) and the glue to the memory of the pauses
// in force (reassert.go). Below it, each layer importing only those under
// it:
//
//	internal/decide  the admission decision: run, hold in-process or defer, from the script's answer
//	internal/local   what one process keeps about scopes between round trips: the open cache, the holders, the slot wakers
//	internal/metrics  the gate's Prometheus series (their names and labels are documented on Collector)
//	internal/failover  what a process remembers of the pauses in force, and their re-assertion after a failover
//	internal/store   running the scripts against Redis: bounded calls, durable writes, the topology
//	internal/model   the admission model: the Go rules, their Lua fragments, the scripts
//	internal/schema  key names, key kinds and record fields (the command imports them too)
//	internal/redistest  real redis-server, Cluster and Sentinel for the tests
//	internal/sim     the provider simulator of the demo and the benchmark matrix
//	hint             what providers send: Retry-After, vendor headers, JSON, prose
//	cmd/quotagate, inspect  the operator's command and the inspector page
//	tracking, example  the user's domain and the runnable demo
package quotagate
