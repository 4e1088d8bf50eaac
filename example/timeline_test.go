package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/sim"
)

// svgPanel is what one panel group of a rendered timeline holds.
type svgPanel struct {
	circles map[string]int          // by class
	bands   map[string][][2]float64 // by class: [x, x+width] of each rect
	ticks   map[string]float64      // a time tick's label → its x
}

// parseTimeline walks svg with encoding/xml, failing on any error, and
// returns its root element and its panels by id.
func parseTimeline(t *testing.T, svg []byte) (xml.StartElement, map[string]*svgPanel) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(svg))
	w := svgWalk{t: t, panels: map[string]*svgPanel{}}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return w.root, w.panels
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			w.start(el)
		case xml.CharData:
			if w.tick != nil {
				w.cur.ticks[strings.TrimSpace(string(el))] = atof(t, w.tick["x"])
				w.tick = nil
			}
		case xml.EndElement:
			if w.depth--; el.Name.Local == "g" && w.depth == 1 {
				w.cur = nil // a panel is a child of the root
			}
		}
	}
}

// svgWalk is parseTimeline's state.
type svgWalk struct {
	t      *testing.T
	root   xml.StartElement
	panels map[string]*svgPanel
	cur    *svgPanel         // the panel being read
	tick   map[string]string // the attributes of the time tick being read
	depth  int
}

func (w *svgWalk) start(el xml.StartElement) {
	if w.depth++; w.depth == 1 {
		w.root = el.Copy()
	}
	attr := attrs(el)
	switch {
	case el.Name.Local == "g" && attr["class"] == "panel":
		w.cur = &svgPanel{circles: map[string]int{}, bands: map[string][][2]float64{}, ticks: map[string]float64{}}
		w.panels[attr["id"]] = w.cur
	case w.cur == nil:
	case el.Name.Local == "circle":
		w.cur.circles[attr["class"]]++
	case el.Name.Local == "rect" && (attr["class"] == "pause" || attr["class"] == "held"):
		x, wd := atof(w.t, attr["x"]), atof(w.t, attr["width"])
		w.cur.bands[attr["class"]] = append(w.cur.bands[attr["class"]], [2]float64{x, x + wd})
	case el.Name.Local == "text" && attr["class"] == "tick" && attr["text-anchor"] == "middle":
		w.tick = attr
	}
}

func attrs(el xml.StartElement) map[string]string {
	m := map[string]string{}
	for _, a := range el.Attr {
		m[a.Name.Local] = a.Value
	}
	return m
}

func atof(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("coordinate %q: %v", s, err)
	}
	return v
}

// ms is n milliseconds.
func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// marks are requests at the given milliseconds, accepted where ok[i].
func marks(at []int, ok string) []mark {
	out := make([]mark, len(at))
	for i, a := range at {
		out[i] = mark{At: ms(a), OK: ok[i] == '+'}
	}
	return out
}

// TestRenderTimeline draws hand-made runs and reads the SVG back: it is
// well-formed XML, self-contained, has a mark per request (refusals in
// their class), and its bands span the pauses on the panel's time axis.
func TestRenderTimeline(t *testing.T) {
	quota := sim.Quota{Shape: sim.FixedClock, Rate: 3, Window: time.Second}
	type want struct {
		ok, refused int
		bands       []wantBand
	}
	for _, c := range []struct {
		name  string
		recs  []recording
		wants map[string]want // by mode
	}{
		{
			name: "wiki and gate",
			recs: []recording{
				{Mode: "local", Requests: marks([]int{10, 20, 30, 40, 50, 1010, 1020, 1030}, "+++--++-"), Wall: ms(1100), Waste: 8.0 / 5},
				{Mode: "gate", Requests: marks([]int{10, 20, 30, 40, 1010, 1020}, "+++-++"), Wall: ms(1050), Waste: 6.0 / 5,
					// A pause noted at the refusal, sampled twice, and a
					// hold of another reason after it, past the axis' end
					// (1.1 s).
					Holds: []hold{{ms(60), ms(1000), true}, {ms(100), ms(1000), true}, {ms(150), ms(990), true}, {ms(1040), ms(2000), false}}},
			},
			wants: map[string]want{
				"local": {ok: 5, refused: 3},
				"gate":  {ok: 5, refused: 1, bands: []wantBand{{"pause", ms(60), ms(1000)}, {"held", ms(1040), ms(1100)}}},
			},
		},
		{
			name:  "nothing refused",
			recs:  []recording{{Mode: "gate", Requests: marks([]int{0, 5, 10}, "+++"), Wall: ms(40), Waste: 1}},
			wants: map[string]want{"gate": {ok: 3}},
		},
		{
			// The axis ends at 1.6 s: 1.5 s in ticks of 0.2 s.
			name: "two pauses, the second past the end",
			recs: []recording{{Mode: "gate", Requests: marks([]int{0, 1, 2, 3, 1000, 1001, 1002, 1003}, "+++-+++-"), Wall: ms(1500), Waste: 2,
				Holds: []hold{{ms(30), ms(1000), true}, {ms(1030), time.Minute, true}}}},
			wants: map[string]want{"gate": {ok: 6, refused: 2, bands: []wantBand{{"pause", ms(30), ms(1000)}, {"pause", ms(1030), ms(1600)}}}},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			svg := renderTimeline(timeline{Title: "fixed/test: <3 per 1s> & more", Note: "a hand-made run", Quota: quota, Polls: 5, Panels: c.recs})
			root, panels := parseTimeline(t, svg)
			if root.Name.Local != "svg" || root.Name.Space != "http://www.w3.org/2000/svg" {
				t.Fatalf("root element %v, want svg in the SVG namespace", root.Name)
			}
			for _, banned := range []string{"<script", "href", "@import", "url(", "@font-face"} {
				if bytes.Contains(svg, []byte(banned)) {
					t.Errorf("the SVG contains %q: want it self-contained", banned)
				}
			}
			if len(panels) != len(c.wants) {
				t.Fatalf("%d panels, want %d", len(panels), len(c.wants))
			}
			for _, rec := range c.recs {
				p, w := panels["panel-"+rec.Mode], c.wants[rec.Mode]
				if p == nil {
					t.Fatalf("no panel-%s", rec.Mode)
				}
				if got := p.circles["ok"] + p.circles["refused"]; got != len(rec.Requests) || len(p.circles) > 2 {
					t.Errorf("%s: marks %v, want %d in all", rec.Mode, p.circles, len(rec.Requests))
				}
				if p.circles["ok"] != w.ok || p.circles["refused"] != w.refused {
					t.Errorf("%s: %d accepted and %d refused marks, want %d and %d", rec.Mode, p.circles["ok"], p.circles["refused"], w.ok, w.refused)
				}
				checkBands(t, rec.Mode, p, w.bands)
			}
			figs := strconv.FormatFloat(c.recs[0].Wall.Seconds(), 'f', 1, 64) + " s to the last poll"
			if !bytes.Contains(svg, []byte(figs)) || !bytes.Contains(svg, []byte("requests per accepted poll")) {
				t.Errorf("no %q and requests per accepted poll in the panel's head", figs)
			}
		})
	}
}

// wantBand is a band a panel should show.
type wantBand struct {
	class    string
	from, to time.Duration // the span expected on the axis
}

// checkBands compares a panel's bands with want, placed by the panel's
// own time ticks "0" and "1" (seconds).
func checkBands(t *testing.T, mode string, p *svgPanel, want []wantBand) {
	t.Helper()
	if len(want) == 0 {
		if len(p.bands) != 0 {
			t.Errorf("%s: bands %v, want none", mode, p.bands)
		}
		return
	}
	x0, ok0 := p.ticks["0"]
	x1, ok1 := p.ticks["1"]
	if !ok0 || !ok1 {
		t.Fatalf("%s: no time ticks 0 and 1 in %v", mode, p.ticks)
	}
	at := func(d time.Duration) float64 { return x0 + d.Seconds()*(x1-x0) }
	n := 0
	for _, list := range p.bands {
		n += len(list)
	}
	if n != len(want) {
		t.Fatalf("%s: bands %v, want %d", mode, p.bands, len(want))
	}
	seen := map[string]int{} // bands of each class checked so far
	for _, w := range want {
		i, got := seen[w.class], p.bands[w.class]
		seen[w.class]++
		if len(got) <= i {
			t.Fatalf("%s: no %s band %d in %v", mode, w.class, i, p.bands)
		}
		if math.Abs(got[i][0]-at(w.from)) > 0.15 || math.Abs(got[i][1]-at(w.to)) > 0.15 {
			t.Errorf("%s: %s band %d spans x %.1f–%.1f, want %.1f–%.1f (%v–%v)", mode, w.class, i, got[i][0], got[i][1], at(w.from), at(w.to), w.from, w.to)
		}
	}
}

// TestCapacity: the quota's line is where a greedy sender is accepted.
func TestCapacity(t *testing.T) {
	for _, c := range []struct {
		q    sim.Quota
		n    int
		want []time.Duration
	}{
		{sim.Quota{Shape: sim.FixedClock, Rate: 2, Window: time.Second}, 5, []time.Duration{0, 0, time.Second, time.Second, 2 * time.Second}},
		{sim.Quota{Shape: sim.TokenBucket, Rate: 4, Burst: 2}, 4, []time.Duration{0, 0, ms(250), ms(500)}},
		{sim.Quota{Shape: sim.Concurrency, Rate: 2}, 3, []time.Duration{0, 0, ms(25)}},
		{sim.Quota{Shape: sim.FixedClock, Rate: 2, Window: time.Second, InFlight: 1}, 3, []time.Duration{0, ms(25), time.Second}},
		{sim.Quota{}, 3, nil},
	} {
		got := capacity(c.q, c.n, ms(25))
		if !slices.Equal(got, c.want) {
			t.Errorf("capacity(%v, %d) = %v, want %v", c.q, c.n, got, c.want)
		}
	}
}

// TestTimeline runs -timeline's loop on a tiny cell and reads its SVG:
// a panel per mode with a mark per request the carrier counted. Counts
// only.
func TestTimeline(t *testing.T) {
	e := miniEnv(t, "timeline")
	path := t.TempDir() + "/t.svg"
	o, err := parseFlags([]string{"-timeline", path, "-polls", "24", "-workers", "8", "-delayed-check", "100ms"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	run, err := selectModes(o.modes)
	if err != nil {
		t.Fatal(err)
	}
	sc := scenario{Name: "tiny", Quota: sim.Quota{Shape: sim.FixedClock, Rate: 10, Window: time.Second}, Dialect: "retry-after"}
	results, err := runTimeline(context.Background(), e, o, sc, run, io.Discard, io.Discard, nil)
	if err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, panels := parseTimeline(t, svg)
	for _, md := range run {
		p, runs := panels["panel-"+md.Name], results[0].byMode[md.Name]
		if p == nil || len(runs) != 1 {
			t.Fatalf("%s: panel %v, %d runs; want a panel and one run", md.Name, p, len(runs))
		}
		f := runs[0]
		if p.circles["ok"] != f.Accepted || p.circles["refused"] != f.Refused {
			t.Errorf("%s: %d accepted and %d refused marks, the carrier counted %d and %d", md.Name, p.circles["ok"], p.circles["refused"], f.Accepted, f.Refused)
		}
		if md.Name == "local" && len(p.bands) != 0 {
			t.Errorf("local: bands %v, want none (nothing is shared)", p.bands)
		}
		if md.Name == "gate" && f.Refused > 0 && len(p.bands["pause"]) == 0 {
			t.Errorf("gate: %d refusals and no pause band", f.Refused)
		}
	}
}
