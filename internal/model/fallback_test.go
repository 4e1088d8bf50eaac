package model

import (
	"testing"
	"time"
)

// fallbackCapDefault is Config.FallbackPause's default, ms, as the
// refusal carries it: 12 hours, the reference article's cap.
const fallbackCapDefault = 12 * 3600 * 1000

// TestFallbackPauseSequence walks a hintless episode that the provider
// refuses at every probe, with the default cap: the pauses double from a
// second to 12 hours and stay there. Each row is one refusal, of the
// first request or of the probe that went alone at the end of the pause
// before; the level outlives pauses far longer than LearnTTL, so every
// refused probe doubles it, and a peer asking during the pause waits for
// its end, or, after it, for the probe's answer.
func TestFallbackPauseSequence(t *testing.T) {
	p := Params{Hold: 1500 * ms, MaxPause: fallbackCapDefault, Answer: 2500 * ms}
	const sec = 1000 // ms
	var s State
	s.Normalize(p, T0)
	if d := s.Admit(p, T0, 1, Background); d.Code != Admitted {
		t.Fatalf("first contact: %+v, want admitted", d)
	}
	at := T0 // the request each row refuses went at
	for _, st := range []struct {
		name  string
		pause int64 // ms: the pause the refusal sets
	}{
		{"the first hintless refusal: a second", 1 * sec},
		{"its probe refused: 2 s", 2 * sec},
		{"4 s", 4 * sec},
		{"8 s", 8 * sec},
		{"16 s", 16 * sec},
		{"32 s", 32 * sec},
		{"64 s", 64 * sec},
		{"128 s", 128 * sec},
		{"256 s", 256 * sec},
		{"512 s", 512 * sec},
		{"1024 s: beyond LearnTTL, the level kept", 1024 * sec},
		{"2048 s", 2048 * sec},
		{"4096 s", 4096 * sec},
		{"8192 s", 8192 * sec},
		{"16384 s", 16384 * sec},
		{"32768 s (9.1 h)", 32768 * sec},
		{"the cap: 12 h", fallbackCapDefault},
		{"the cap again", fallbackCapDefault},
		{"and again", fallbackCapDefault},
	} {
		now := at + 50*ms // the refusal's answer
		d, moved := s.Refuse(p, now, Refusal{Pause: fallbackCapDefault})
		if want := (now + st.pause*1000) / ms; d != want || !moved {
			t.Fatalf("%s: deadline %d moved %v, want %d (+%d ms) moved (episode %+v)", st.name, d, moved, want, st.pause, s.fall)
		}
		if s.fall.expires < d*1000+LearnTTL {
			t.Fatalf("%s: the episode is forgotten at %d, before its pause's end %d and LearnTTL", st.name, s.fall.expires, d*1000)
		}
		mid := now + st.pause*500
		if g := s.Admit(p, mid, 1, Background); g.Code != Paused || g.Until != d {
			t.Fatalf("%s: a peer in the pause: %+v, want paused until %d", st.name, g, d)
		}
		at = d * 1000
		if g := s.Admit(p, at, 1, Background); g.Code != Admitted || g.Opens != at {
			t.Fatalf("%s: the pause's end: %+v, want the probe admitted alone (state %+v)", st.name, g, s.fall)
		}
		if g := s.Admit(p, at+10*ms, 1, Background); g.Code == Admitted || g.Reason != ReasonProbe {
			t.Fatalf("%s: a peer beside the probe: %+v, want it to wait for the probe's answer", st.name, g)
		}
	}
	// The probe answered: the episode is over, the next refusal a second.
	s.Observe(p, at+50*ms, Observation{Remaining: -2, Opened: at})
	if d, _ := s.Refuse(p, at+100*ms, Refusal{Pause: fallbackCapDefault}); d != (at+1100*ms)/ms {
		t.Fatalf("after an answered probe: deadline %d, want a second", d)
	}
}

// TestDifferentialLongEpisode runs through model and scripts a hintless
// episode whose probes are refused until its pauses are longer than
// LearnTTL, under a cap of an hour (the differential test's MaxPause):
// the episode's record must outlive each pause in Redis too (its key's
// expiry), so that the probe's refusal doubles the level instead of
// starting over at a second.
func TestDifferentialLongEpisode(t *testing.T) {
	c, rdb := newMini(t)
	a := diffEvent{kind: 'a', cost: 1, class: Background}
	const capMs = 3_600_000
	refuse := diffEvent{kind: 'r', pause: capMs, prec: 1_000_000}
	tick := func(d time.Duration) diffEvent { return diffEvent{kind: 't', advance: d} }
	evs := []diffEvent{a, tick(50 * time.Millisecond), refuse}
	level := time.Second
	for range 14 { // 1 s … 2048 s, then the cap's hour twice
		evs = append(evs, tick(level/2), a, tick(level/2), a, tick(50*time.Millisecond), refuse)
		level = min(2*level, capMs*time.Millisecond)
	}
	seen := map[string]int{}
	diffRun(t, rdb, c, "qglong", nil, 0, evs, seen)
	if seen["hintless probe"] < 14 || seen["hintless pause grown"] < 14 {
		t.Errorf("the probes were not each refused into a longer pause: paths %v", seen)
	}
}
