package quotagate

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestOneLogLinePerPause: of the refusals of one pause, the one that moved
// the deadline logs at INFO; those of requests already on their way log at
// DEBUG, with a count.
func TestOneLogLinePerPause(t *testing.T) {
	_, rdb := newMini(t)
	var logs testLogBuffer
	g := New(rdb, Config{Prefix: "qgtest", Logger: logs.logger()})
	defer g.Close()
	s := Scope{Provider: "acme", Account: "a"}
	k := scopeKeys("qgtest", s)
	for range 4 {
		if _, ok := g.record(context.Background(), s, k, 10*time.Second, 0, grant{}); !ok {
			t.Fatal("refusal not recorded")
		}
	}
	out := logs.String()
	if n := strings.Count(out, "level=INFO"); n != 1 {
		t.Errorf("%d INFO lines for one pause, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "level=DEBUG") || !strings.Contains(out, "absorbed=3") {
		t.Errorf("no DEBUG line counting the 3 absorbed refusals:\n%s", out)
	}
}
