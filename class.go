package quotagate

import (
	"context"
	"fmt"
	"slices"

	"github.com/hibiken/asynq"
)

// Class is the kind of work a task does within its scope's quota. While
// interactive work has asked within Tuning.LendAfter, background work
// leaves Config.Reserve of every capacity of the scope unspent (a limit's
// burst or window, the learned limit, the advertised budget), so that a
// poll somebody waits for finds capacity at once while a sweep runs at the
// rest; an interactive task that has to wait comes back ahead of the
// background work waiting with it (see internal/model/class.go).
//
// A task's class is the one passed to NewTask (the "quotagate-class"
// header), else Interactive when its queue is one of
// Config.InteractiveQueues, else Background. A request through the
// Transport outside asynq takes the class of its context (WithClass).
//
// A Class is also an asynq.Option for NewTask, which turns it into the
// header: pass it to NewTask, not to asynq.NewTask or Client.Enqueue
// (asynq ignores options it does not know).
type Class int

const (
	// Background is work nobody waits for (a sweep): the default.
	Background Class = iota
	// Interactive is work somebody waits for (a poll a person triggered).
	Interactive
)

// headerClass carries a task's class (see NewTask).
const headerClass = "quotagate-class"

// classOpt is the asynq.OptionType of a Class: none of asynq's own.
const classOpt asynq.OptionType = -1

func (c Class) String() string {
	switch c {
	case Background:
		return "background"
	case Interactive:
		return "interactive"
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

// Type makes a Class an asynq.Option (for NewTask).
func (c Class) Type() asynq.OptionType { return classOpt }

// Value makes a Class an asynq.Option (for NewTask).
func (c Class) Value() any { return c }

// classes are the classes there are, in the order of the metrics' class
// label values.
var classes = []Class{Background, Interactive}

// classOfHeader reads the class a task's header names, false when it
// names none (or one there is not).
func classOfHeader(t *asynq.Task) (Class, bool) {
	v, ok := t.Headers()[headerClass]
	if !ok {
		return Background, false
	}
	for _, c := range classes {
		if c.String() == v {
			return c, true
		}
	}
	return Background, false
}

// classOf is the class of task t run with ctx (see Class).
func (g *Gate) classOf(ctx context.Context, t *asynq.Task) Class {
	if c, ok := classOfHeader(t); ok {
		return c
	}
	if q, ok := asynq.GetQueueName(ctx); ok && slices.Contains(g.cfg.InteractiveQueues, q) {
		return Interactive
	}
	return Background
}

type classCtxKey struct{}

// WithClass returns a context whose requests through the Transport, outside
// an asynq task, are of class c (a web handler polling for a person:
// Interactive). Inside a task the task's class wins.
func WithClass(ctx context.Context, c Class) context.Context {
	return context.WithValue(ctx, classCtxKey{}, c)
}

// classFromContext is the class WithClass put in ctx, Background if none.
func classFromContext(ctx context.Context) Class {
	c, _ := ctx.Value(classCtxKey{}).(Class)
	return c
}
