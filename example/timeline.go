package main

import (
	"bytes"
	"cmp"
	"encoding/xml"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quotagate/quotagate/internal/sim"
)

// This file draws -timeline: one run of a cell in each of its modes, as the
// constrained carrier saw it, one panel per mode on one time axis, in a
// self-contained SVG (no script, no external font or image). The drawing
// is a pure function of the recordings (renderTimeline); bench.go runs them
// (runTimeline).
//
// A panel counts up: each accepted request is a mark at its arrival and at
// the count of requests accepted so far, so the accepted marks climb under
// the quota's line (the most the quota can have accepted by then); each
// refusal is a red mark at the count of refusals so far. Shaded bands are
// what the gate held the scope for: its pauses, shared by every worker,
// and its other holds (a learned limit, a spent budget). Without a gate
// nothing is shared: each refused task waits its own hint, and the panel
// has no band.

// A recording is one run of a mode as the constrained carrier saw it; its
// instants are offsets from the start of the quota's first window.
type recording struct {
	Mode     string
	Requests []mark        // every request the carrier received, in arrival order
	Holds    []hold        // the gate's, as it recorded them; none without a gate
	Wall     time.Duration // to the last poll done
	Waste    float64       // requests per accepted poll
}

// mark is one request the carrier received.
type mark struct {
	At time.Duration
	OK bool // accepted; else refused
}

// hold is [From, To) in which the gate held the scope: for a refusal's
// pause (Paused), or for another reason.
type hold struct {
	From, To time.Duration
	Paused   bool
}

// interval is [From, To).
type interval struct{ From, To time.Duration }

// timeline is what one SVG shows: a cell's recordings, one panel each.
type timeline struct {
	Title   string // the cell and its provider
	Note    string // the workload and its settings
	Quota   sim.Quota
	Latency time.Duration // the carrier's: a concurrency limit's capacity depends on it
	Polls   int           // polls at the constrained carrier
	Panels  []recording
}

// The timeline's geometry, in pixels.
const (
	tlWidth  = 960
	tlLeft   = 72  // the count axis and its labels
	tlRight  = 24  // after the time axis' end
	tlTop    = 100 // title, note and legend
	tlHead   = 44  // a panel's head and figures, above its plot
	tlPlot   = 210 // a plot's height
	tlFoot   = 34  // the time axis' labels under a plot
	tlBottom = 28  // the time axis' title
	tlMark   = 2.2 // a mark's radius
)

const tlStyle = `text{font-family:sans-serif;font-size:12px;fill:#222}
.title{font-size:16px;font-weight:bold}
.note{fill:#555}
.head{font-weight:bold}
.figs{fill:#333}
.tick{fill:#555;font-size:11px}
.plot{fill:#fff;stroke:#999}
.grid{stroke:#ececec}
.ok{fill:#1f5fa8}
.refused{fill:#d62728}
.pause{fill:#f0a30a;fill-opacity:.3}
.held{fill:#7b61c4;fill-opacity:.16}
.quota{fill:none;stroke:#2a9d4b;stroke-width:1.6}
.done{stroke:#333;stroke-width:1.2;stroke-dasharray:5 3}`

// tlLayout is the timeline's scales: time from 0 to span, ticks every
// step; counts from 0 to ymax, ticks every ystep.
type tlLayout struct {
	span, step  time.Duration
	ymax, ystep int
}

func newLayout(tl timeline) tlLayout {
	var end time.Duration
	most := tl.Polls
	for _, p := range tl.Panels {
		end = max(end, p.Wall)
		ok, refused := 0, 0
		for _, m := range p.Requests {
			end = max(end, m.At)
			if m.OK {
				ok++
			} else {
				refused++
			}
		}
		most = max(most, ok, refused)
	}
	var l tlLayout
	l.step = timeStep(end)
	l.span = max(ceilDiv(end, l.step), 1) * l.step
	l.ystep = countStep(most)
	l.ymax = max(ceilDiv(most, l.ystep), 1) * l.ystep
	return l
}

// timeStep is the first step of 1, 2, 5 × 10ⁿ ms, or of 10 s, 15 s, 30 s
// and whole minutes, that cuts end into at most 12 ticks.
func timeStep(end time.Duration) time.Duration {
	for _, s := range []time.Duration{100, 200, 500, 1000, 2000, 5000, 10000, 15000, 30000, 60000, 120000, 300000} {
		if s*time.Millisecond*12 >= end {
			return s * time.Millisecond
		}
	}
	return ceilDiv(end, 12*time.Minute) * time.Minute
}

// countStep is the first step of 1, 2, 5 × 10ⁿ that cuts most into at most
// 6 ticks.
func countStep(most int) int {
	for s := 1; ; s *= 10 {
		for _, k := range []int{1, 2, 5} {
			if k*s*6 >= most {
				return k * s
			}
		}
	}
}

func ceilDiv[T ~int | ~int64](a, b T) T { return (a + b - 1) / b }

// x is the abscissa of t, clamped to the axis.
func (l tlLayout) x(t time.Duration) float64 {
	t = min(max(t, 0), l.span)
	return tlLeft + float64(t)/float64(l.span)*(tlWidth-tlLeft-tlRight)
}

// y is the ordinate of count n in the plot whose top is top.
func (l tlLayout) y(top float64, n int) float64 {
	return top + tlPlot - float64(n)/float64(l.ymax)*tlPlot
}

// panelTop is the top of panel i's plot.
func panelTop(i int) float64 { return float64(tlTop + i*(tlHead+tlPlot+tlFoot) + tlHead) }

// svgBuf writes the SVG.
type svgBuf struct{ bytes.Buffer }

func (b *svgBuf) f(format string, args ...any) { fmt.Fprintf(b, format, args...) }

// num is a coordinate: one decimal.
func num(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// esc is s escaped for XML text and attributes.
func esc(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}

// renderTimeline draws tl as a standalone SVG document.
func renderTimeline(tl timeline) []byte {
	l := newLayout(tl)
	n := len(tl.Panels)
	height := tlTop + n*(tlHead+tlPlot+tlFoot) + tlBottom
	var b svgBuf
	b.f(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	b.f(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", tlWidth, height, tlWidth, height)
	b.f("<title>%s</title>\n<style>\n%s\n</style>\n", esc(tl.Title), tlStyle)
	b.f(`<rect width="100%%" height="100%%" fill="#fafafa"/>` + "\n")
	b.f(`<text class="title" x="%d" y="24">%s</text>`+"\n", tlLeft, esc(tl.Title))
	b.f(`<text class="note" x="%d" y="44">%s</text>`+"\n", tlLeft, esc(tl.Note))
	drawLegend(&b)
	caps := capacity(tl.Quota, tl.Polls, tl.Latency)
	for i, rec := range tl.Panels {
		drawPanel(&b, l, panelTop(i), rec, caps)
	}
	b.f(`<text x="%s" y="%d" text-anchor="middle">seconds since the start of the quota's first window</text>`+"\n",
		num((tlLeft+tlWidth-tlRight)/2.0), height-10)
	b.f("</svg>\n")
	return b.Bytes()
}

// drawLegend writes the legend: two rows of three.
func drawLegend(b *svgBuf) {
	items := []struct{ swatch, label string }{
		{`<circle class="ok" cx="6" cy="-4" r="3"/>`, "accepted (count so far)"},
		{`<circle class="refused" cx="6" cy="-4" r="3"/>`, "refused (count so far)"},
		{`<path class="quota" d="M0 -1 H5 V-8 H12"/>`, "quota: the most it accepts by then"},
		{`<rect class="pause" x="0" y="-11" width="12" height="12"/>`, "the gate's pause (every worker waits)"},
		{`<rect class="held" x="0" y="-11" width="12" height="12"/>`, "the gate holds it (learned limit, budget…)"},
		{`<line class="done" x1="6" y1="-12" x2="6" y2="2"/>`, "last poll done"},
	}
	b.f(`<g class="legend">` + "\n")
	for i, it := range items {
		b.f(`<g transform="translate(%d %d)">%s<text x="18" y="0">%s</text></g>`+"\n",
			tlLeft+(i%3)*300, 68+(i/3)*20, it.swatch, esc(it.label))
	}
	b.f("</g>\n")
}

// drawPanel writes one recording's panel, its plot's top at top.
func drawPanel(b *svgBuf, l tlLayout, top float64, rec recording, caps []time.Duration) {
	b.f(`<g class="panel" id="panel-%s">`+"\n", esc(rec.Mode))
	ok, refused := 0, 0
	for _, m := range rec.Requests {
		if m.OK {
			ok++
		} else {
			refused++
		}
	}
	head := modeHeads[rec.Mode]
	if head == "" {
		head = rec.Mode
	}
	b.f(`<text class="head" x="%d" y="%s">%s</text>`+"\n", tlLeft, num(top-24), esc(head))
	b.f(`<text class="figs" x="%d" y="%s">%.1f s to the last poll · %.2f requests per accepted poll (%d requests, %d refused)</text>`+"\n",
		tlLeft, num(top-8), rec.Wall.Seconds(), rec.Waste, ok+refused, refused)
	drawGrid(b, l, top)
	drawBands(b, l, top, rec)
	drawQuota(b, l, top, caps)
	if rec.Wall > 0 {
		x := num(l.x(rec.Wall))
		b.f(`<line class="done" x1="%s" y1="%s" x2="%s" y2="%s"/>`+"\n", x, num(top), x, num(top+tlPlot))
	}
	drawMarks(b, l, top, rec)
	b.f("</g>\n")
}

// drawGrid writes a plot's frame, its count axis and its time axis.
func drawGrid(b *svgBuf, l tlLayout, top float64) {
	left, right := l.x(0), l.x(l.span)
	b.f(`<rect class="plot" x="%s" y="%s" width="%s" height="%d"/>`+"\n", num(left), num(top), num(right-left), tlPlot)
	for n := 0; n <= l.ymax; n += l.ystep {
		y := num(l.y(top, n))
		b.f(`<line class="grid" x1="%s" y1="%s" x2="%s" y2="%s"/>`+"\n", num(left), y, num(right), y)
		b.f(`<text class="tick" x="%s" y="%s" text-anchor="end" dominant-baseline="middle">%d</text>`+"\n", num(left-6), y, n)
	}
	mid := num(top + tlPlot/2)
	b.f(`<text x="20" y="%s" text-anchor="middle" transform="rotate(-90 20 %s)">requests, counted up</text>`+"\n", mid, mid)
	for t := time.Duration(0); t <= l.span; t += l.step {
		x := num(l.x(t))
		b.f(`<line class="grid" x1="%s" y1="%s" x2="%s" y2="%s"/>`+"\n", x, num(top+tlPlot), x, num(top+tlPlot+5))
		b.f(`<text class="tick" x="%s" y="%s" text-anchor="middle">%s</text>`+"\n",
			x, num(top+tlPlot+18), strconv.FormatFloat(t.Seconds(), 'f', -1, 64))
	}
}

// drawBands writes the gate's holds, merged by kind and clipped to the
// axis: the other holds first, the pauses over them.
func drawBands(b *svgBuf, l tlLayout, top float64, rec recording) {
	for _, kind := range []struct {
		class  string
		paused bool
	}{{"held", false}, {"pause", true}} {
		var list []interval
		for _, h := range rec.Holds {
			if h.Paused == kind.paused {
				list = append(list, interval{h.From, h.To})
			}
		}
		for _, iv := range mergeIntervals(list) {
			x0, x1 := l.x(iv.From), l.x(iv.To)
			if x1 > x0 {
				b.f(`<rect class="%s" x="%s" y="%s" width="%s" height="%d"/>`+"\n", kind.class, num(x0), num(top), num(x1-x0), tlPlot)
			}
		}
	}
}

// drawQuota writes the quota's line: the most it can have accepted by each
// instant (capacity), up to the polls, then level to the axis' end.
func drawQuota(b *svgBuf, l tlLayout, top float64, caps []time.Duration) {
	if len(caps) == 0 {
		return
	}
	var d strings.Builder
	fmt.Fprintf(&d, "M%s %s", num(l.x(0)), num(l.y(top, 0)))
	for i, t := range caps {
		if i+1 < len(caps) && caps[i+1] == t {
			continue // one step for every request accepted at once
		}
		fmt.Fprintf(&d, " H%s V%s", num(l.x(t)), num(l.y(top, i+1)))
	}
	fmt.Fprintf(&d, " H%s", num(l.x(l.span)))
	b.f(`<path class="quota" d="%s"/>`+"\n", d.String())
}

// drawMarks writes a mark per request: an accepted one at the count of
// accepted requests so far, a refusal at the count of refusals so far.
func drawMarks(b *svgBuf, l tlLayout, top float64, rec recording) {
	ok, refused := 0, 0
	for _, m := range rec.Requests {
		class, n := "ok", 0
		if m.OK {
			ok++
			n = ok
		} else {
			refused++
			class, n = "refused", refused
		}
		b.f(`<circle class="%s" cx="%s" cy="%s" r="%.1f"/>`+"\n", class, num(l.x(m.At)), num(l.y(top, n)), tlMark)
	}
}

// mergeIntervals returns the union of list as disjoint intervals, in
// order; empty ones are dropped.
func mergeIntervals(list []interval) []interval {
	var sorted []interval
	for _, iv := range list {
		if iv.To > iv.From {
			sorted = append(sorted, iv)
		}
	}
	slices.SortFunc(sorted, func(a, b interval) int { return cmp.Compare(a.From, b.From) })
	var out []interval
	for _, iv := range sorted {
		if k := len(out) - 1; k >= 0 && iv.From <= out[k].To {
			out[k].To = max(out[k].To, iv.To)
			continue
		}
		out = append(out, iv)
	}
	return out
}

// capacity is when the quota accepts each of n requests at the earliest
// (sim.Quota.Schedule): the line no run's accepted requests can rise
// above. nil when the quota is not one (a hand-made timeline).
func capacity(q sim.Quota, n int, latency time.Duration) []time.Duration {
	if q.Validate() != nil || n <= 0 {
		return nil
	}
	return q.Schedule(n, latency)
}
