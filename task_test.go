package quotagate

import (
	"context"
	"strconv"
	"testing"

	"github.com/hibiken/asynq"
)

func TestNewTaskScopeOf(t *testing.T) {
	for _, s := range []Scope{
		{Provider: "ups", Account: "acct-1"},
		{Provider: "ups"},
		{Provider: "a:b{c}", Account: Fingerprint("sk")},
	} {
		task := NewTask("poll", []byte("1Z999"), s, asynq.Queue("carriers"))
		got, ok := ScopeOf(task)
		if !ok || got != s {
			t.Errorf("ScopeOf(NewTask(%v)) = %v, %v", s, got, ok)
		}
		if task.Type() != "poll" || string(task.Payload()) != "1Z999" {
			t.Errorf("task %q %q", task.Type(), task.Payload())
		}
		if _, has := task.Headers()[headerAccount]; has != (s.Account != "") {
			t.Errorf("%v: account header present = %v", s, has)
		}
	}
	for _, task := range []*asynq.Task{
		nil,
		asynq.NewTask("poll", nil),
		asynq.NewTaskWithHeaders("poll", nil, map[string]string{headerAccount: "acct"}),
		asynq.NewTaskWithHeaders("poll", nil, map[string]string{headerProvider: ""}),
	} {
		if s, ok := ScopeOf(task); ok {
			t.Errorf("ScopeOf(%v) = %v, true; want false", task, s)
		}
	}
}

func TestNewTaskMaxRetry(t *testing.T) {
	_, rdb := newMini(t)
	client := asynq.NewClientFromRedisClient(rdb)
	insp := asynq.NewInspectorFromRedisClient(rdb)
	ctx := context.Background()
	for i, tc := range []struct {
		opts     []asynq.Option
		header   string
		maxRetry int
	}{
		{nil, "25", 26},
		{[]asynq.Option{asynq.MaxRetry(0)}, "0", 1},
		{[]asynq.Option{asynq.MaxRetry(3)}, "3", 4},
		{[]asynq.Option{asynq.MaxRetry(-2)}, "0", 1},
		{[]asynq.Option{asynq.MaxRetry(3), asynq.MaxRetry(7)}, "7", 8}, // the last one wins, as in asynq
		{[]asynq.Option{asynq.Queue("carriers"), asynq.MaxRetry(2), asynq.TaskID("poll:ups:1Z")}, "2", 3},
	} {
		task := NewTask("poll", nil, Scope{Provider: "ups", Account: "acct"}, tc.opts...)
		if got := task.Headers()[headerMaxRetry]; got != tc.header {
			t.Errorf("case %d: header %s = %q, want %q", i, headerMaxRetry, got, tc.header)
		}
		if n, ok := userMaxRetry(task); !ok || strconv.Itoa(n) != tc.header {
			t.Errorf("case %d: userMaxRetry = %d, %v", i, n, ok)
		}
		enq, err := client.EnqueueContext(ctx, task)
		if err != nil {
			t.Fatalf("case %d: enqueue: %v", i, err)
		}
		info, err := insp.GetTaskInfo(enq.Queue, enq.ID)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if info.MaxRetry != tc.maxRetry {
			t.Errorf("case %d: asynq MaxRetry = %d, want %d", i, info.MaxRetry, tc.maxRetry)
		}
		if info.Headers[headerMaxRetry] != tc.header || info.Headers[headerProvider] != "ups" || info.Headers[headerAccount] != "acct" {
			t.Errorf("case %d: stored headers %v", i, info.Headers)
		}
	}
	if info, _ := insp.GetTaskInfo("carriers", "poll:ups:1Z"); info == nil || info.Queue != "carriers" {
		t.Error("NewTask dropped the Queue or TaskID option")
	}
}

func TestUserMaxRetry(t *testing.T) {
	for v, want := range map[string]struct {
		n  int
		ok bool
	}{
		"0": {0, true}, "25": {25, true}, "-1": {0, false}, "x": {0, false}, "": {0, false}, "1.5": {0, false},
	} {
		task := asynq.NewTaskWithHeaders("poll", nil, map[string]string{headerMaxRetry: v})
		if n, ok := userMaxRetry(task); ok != want.ok || ok && n != want.n {
			t.Errorf("userMaxRetry(%q) = %d, %v; want %d, %v", v, n, ok, want.n, want.ok)
		}
	}
	if _, ok := userMaxRetry(asynq.NewTask("poll", nil)); ok {
		t.Error("userMaxRetry of a plain task: ok")
	}
}
