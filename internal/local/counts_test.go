package local

import (
	"testing"
	"time"
)

// TestUncountedSteps walks Uncounted: counts add up from their first
// admission, a count older than Span begins again, a failed round trip's
// count given back keeps the earlier first, and Take empties the scope.
func TestUncountedSteps(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	u := Uncounted{Span: 10 * time.Minute}
	steps := []struct {
		name string
		add  Count
		want Count
	}{
		{"the first admission", Count{N: 1, First: t0}, Count{N: 1, First: t0}},
		{"another, later: the first stays", Count{N: 2, First: t0.Add(time.Minute)}, Count{N: 3, First: t0}},
		{"given back, earlier: the earlier first", Count{N: 4, First: t0.Add(-time.Second)}, Count{N: 7, First: t0.Add(-time.Second)}},
		{"nothing", Count{N: 0, First: t0.Add(time.Hour)}, Count{N: 7, First: t0.Add(-time.Second)}},
		{"Span after the first: begins again", Count{N: 1, First: t0.Add(10 * time.Minute)}, Count{N: 1, First: t0.Add(10 * time.Minute)}},
	}
	for _, st := range steps {
		u.Add("k", st.add)
		got := u.Take("k")
		if got != st.want {
			t.Fatalf("%s: %+v, want %+v", st.name, got, st.want)
		}
		u.Add("k", got)
	}
	if c := u.Take("k"); c.Age(t0.Add(11*time.Minute)) != time.Minute {
		t.Errorf("age of %+v: %v, want 1m", c, c.Age(t0.Add(11*time.Minute)))
	}
	if c := u.Take("k"); c.N != 0 || c.Age(t0) != 0 {
		t.Errorf("taken twice: %+v, age %v", c, c.Age(t0))
	}
}
