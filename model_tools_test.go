//go:build modeltools

package quotagate

import (
	"cmp"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/model"
	"github.com/quotagate/quotagate/internal/sim"
)

// The model's tools: runs of the simulations that print what they see,
// for a person reading what the model does. They assert nothing, so they
// are built only with -tags modeltools.

// TestModelShapes prints every cell of the matrix on the model: plain
// shared pause, nothing configured, configured, and the ideal. It is a
// tool, built with -tags modeltools: every cell, or those QUOTAGATE_SHAPES
// lists (comma-separated); with QUOTAGATE_SHAPES_TRACE=mode the runs of
// that mode are traced.
//
//	go test -tags modeltools -run TestModelShapes -v .
func TestModelShapes(t *testing.T) {
	sel := cmp.Or(os.Getenv("QUOTAGATE_SHAPES"), "1")
	tr := os.Getenv("QUOTAGATE_SHAPES_TRACE")
	for _, c := range shapeCells {
		if sel != "1" && !strings.Contains(","+sel+",", ","+c.name+",") {
			continue
		}
		_, dn, _ := strings.Cut(c.name, "/")
		d, _ := sim.DialectNamed(dn)
		run := func(mode string, ls []Limit, plain bool) shapeRun {
			if tr == mode {
				shapeTrace = t.Logf
				defer func() { shapeTrace = nil }()
			}
			return simulateShape(c.quota, d, ls, 20, 200, 25_000, plain, 90_000_000)
		}
		pl, g := run("pause", nil, true), run("gate", nil, false)
		var cf shapeRun
		if len(c.limits) > 0 {
			cf = run("limit", c.limits, false)
		}
		f := func(r shapeRun) string {
			if r.accepted < 200 {
				return "incomplete " + itoa(r.accepted) + " " + strings.TrimRight(strings.TrimRight(ftoa(r.waste()), "0"), ".") + "x"
			}
			return strings.TrimRight(strings.TrimRight(ftoa(r.waste()), "0"), ".") + "x " + ftoa(float64(r.end)/1e6) + "s"
		}
		t.Logf("%-26s pause %-18s gate %-18s limit %-18s ideal %.2fs", c.name, f(pl), f(g), f(cf), c.quota.IdealLatency(200, 25*time.Millisecond).Seconds())
	}
}

func itoa(v int) string { return strconv.Itoa(v) }

func ftoa(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }

// TestModelSimTrace traces one simulated run, event by event: the case
// QUOTAGATE_SIMTRACE names ("bucket", "clock", the default, or "first").
// A tool for reading what learning does, built with -tags modeltools:
//
//	go test -tags modeltools -run TestModelSimTrace -v .
func TestModelSimTrace(t *testing.T) {
	simTraceCase := cmp.Or(os.Getenv("QUOTAGATE_SIMTRACE"), "clock")
	simTrace = t.Logf
	defer func() { simTrace = nil }()
	p := model.Params{Hold: 1_500_000, MaxPause: 12 * 3600 * 1000, Answer: 2_500_000}
	switch simTraceCase {
	case "bucket":
		simulate(p, &simBucket{per: 125_000, burst: 10}, 20, 200, 12_500, false)
	case "clock":
		simulate(p, &simFixed{n: 40, w: 5_000_000}, 20, 200, 12_500, false)
	case "first":
		simulate(p, &simFixed{n: 5, w: 3_000_000, fromFirst: true}, 20, 30, 12_500, false)
	}
}
