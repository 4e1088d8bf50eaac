package quotagate

import (
	"context"
	"github.com/quotagate/quotagate/internal/metrics"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
)

// collectorDoc returns the doc comment of Gate.Collector, as go doc shows it.
func collectorDoc(t *testing.T) string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "metrics.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "Collector" && fn.Doc != nil {
			return fn.Doc.Text()
		}
	}
	t.Fatal("no doc comment on Collector in metrics.go")
	return ""
}

// TestMetricsDocumented: the op and outcome values the Collector doc lists
// are metrics.StoreOps and metrics.Outcomes, in order.
func TestMetricsDocumented(t *testing.T) {
	doc := collectorDoc(t)
	m := regexp.MustCompile(`op is the store operation: ([^.]+)\.`).FindStringSubmatch(doc)
	if m == nil {
		t.Fatalf("the Collector doc has no \"op is the store operation: ...\":\n%s", doc)
	}
	documented := strings.FieldsFunc(strings.ReplaceAll(m[1], " or ", ", "), func(r rune) bool { return r == ',' || r == ' ' || r == '\n' })
	if !slices.Equal(documented, metrics.StoreOps) {
		t.Errorf("the doc lists the ops %q, metrics.StoreOps is %q", documented, metrics.StoreOps)
	}

	_, list, ok := strings.Cut(doc, "outcome is one of\n")
	list, _, ok2 := strings.Cut(list, "quotagate_refusals_total")
	if !ok || !ok2 {
		t.Fatalf("the Collector doc has no outcome list:\n%s", doc)
	}
	var listed []metrics.Outcome
	for _, m := range regexp.MustCompile(`(?m)^\t    ([a-z_]+)  `).FindAllStringSubmatch(list, -1) {
		listed = append(listed, metrics.Outcome(m[1]))
	}
	if !slices.Equal(listed, metrics.Outcomes) {
		t.Errorf("the doc lists the outcomes %q, metrics.Outcomes is %q", listed, metrics.Outcomes)
	}
}

// TestMetricsOpsInSource: the op of every store call in the storage
// layer's source (internal/store: the op argument of run and bounded) is
// in metrics.StoreOps, and every one of metrics.StoreOps is used: the label's values are
// the ones documented.
func TestMetricsOpsInSource(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("internal", "store", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	used := map[string]bool{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			var fn string
			switch e := call.Fun.(type) {
			case *ast.Ident:
				fn = e.Name
			case *ast.SelectorExpr:
				fn = e.Sel.Name
			case *ast.IndexExpr: // bounded[T](...)
				if id, ok := e.X.(*ast.Ident); ok {
					fn = id.Name
				}
			}
			at := map[string]int{"run": 1, "bounded": 2}[fn]
			if at == 0 || len(call.Args) <= at {
				return true
			}
			switch a := call.Args[at].(type) {
			case *ast.BasicLit:
				op, err := strconv.Unquote(a.Value)
				if err != nil || a.Kind != token.STRING {
					t.Errorf("%v: op %s is not a string", fset.Position(a.Pos()), a.Value)
				}
				used[op] = true
				if !slices.Contains(metrics.StoreOps, op) {
					t.Errorf("%v: op %q is not in metrics.StoreOps %q (add it there: the doc and the zero series follow)", fset.Position(a.Pos()), op, metrics.StoreOps)
				}
			case *ast.Ident:
				if a.Name != "op" { // run passes its own op on to bounded
					t.Errorf("%v: op %s is not a literal: this test cannot check it", fset.Position(a.Pos()), a.Name)
				}
			default:
				t.Errorf("%v: op is not a literal: this test cannot check it", fset.Position(call.Args[at].Pos()))
			}
			return true
		})
	}
	if len(used) == 0 {
		t.Fatal("no store call (run, bounded) found in internal/store's source: where are round trips timed now?")
	}
	for _, op := range metrics.StoreOps {
		if !used[op] {
			t.Errorf("metrics.StoreOps has %q, which no store call uses", op)
		}
	}
}

// TestMetricsOpsEmitted: the public operations of a gate time their round
// trips under exactly the ops metrics.StoreOps lists.
func TestMetricsOpsEmitted(t *testing.T) {
	_, rdb := newMini(t)
	ctx := context.Background()
	g := New(rdb, Config{Prefix: "qgtest", Logger: (&testLogBuffer{}).logger(), Limits: map[string][]Limit{"conc": {Concurrent(1)}}})
	defer g.Close()
	s := Scope{Provider: "acme", Account: "acct-1"}

	mux := asynq.NewServeMux()
	mux.Use(g.Middleware())
	mux.HandleFunc("t", func(context.Context, *asynq.Task) error { return nil })
	if err := mux.ProcessTask(ctx, NewTask("t", nil, s)); err != nil {
		t.Fatal(err)
	}
	if err := mux.ProcessTask(ctx, NewTask("t", nil, Scope{Provider: "conc", Account: "acct-1"})); err != nil { // its lease: release
		t.Fatal(err)
	}
	if err := g.Observe(ctx, s, &http.Response{StatusCode: http.StatusOK, Header: http.Header{
		"X-Ratelimit-Limit": {"100"}, "X-Ratelimit-Remaining": {"50"}, "X-Ratelimit-Reset": {"60"},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Pause(ctx, s, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := g.State(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := g.Resume(ctx, s); err != nil {
		t.Fatal(err)
	}
	got := scrape(t, g) // its own SCAN: scan

	var emitted []string
	for name, v := range got {
		if op, ok := strings.CutPrefix(name, "quotagate_store_duration_seconds{op="); ok && v > 0 {
			emitted = append(emitted, strings.TrimSuffix(op, "}_count"))
		}
	}
	slices.Sort(emitted)
	if !slices.Equal(emitted, metrics.StoreOps) {
		t.Errorf("round trips timed under the ops %q, metrics.StoreOps is %q", emitted, metrics.StoreOps)
	}
}

// TestMetricsZeroFromTheStart: the store's series are there at zero from
// the first scrape, for every op; a provider's for every outcome, its
// refusals and budgets, from the first time the gate meets it, whichever
// way; no provider's before.
func TestMetricsZeroFromTheStart(t *testing.T) {
	_, rdb := newMini(t)
	g := New(rdb, Config{Prefix: "qgtest", Logger: (&testLogBuffer{}).logger()})
	defer g.Close()

	first := scrape(t, g)
	for _, op := range metrics.StoreOps {
		for _, name := range []string{"quotagate_store_errors_total{op=" + op + "}", "quotagate_store_duration_seconds{op=" + op + "}_count"} {
			if v, ok := first[name]; !ok || (v != 0 && op != "scan") {
				t.Errorf("first scrape: %s = %v, %v; want a zero series", name, v, ok)
			}
		}
	}
	for name := range first {
		if strings.Contains(name, "provider=") {
			t.Errorf("first scrape: %s before any provider was met", name)
		}
	}

	// Met by an admission, by a refusal, by an observed budget.
	g.metrics.Admission("acme", Background.String(), metrics.Admitted)
	g.metrics.Refusal("swift")
	g.metrics.BudgetObserved("ups")
	got := scrape(t, g)
	for _, p := range []string{"acme", "swift", "ups"} {
		for _, c := range classes {
			for _, o := range metrics.Outcomes {
				name := "quotagate_admissions_total{class=" + c.String() + ",outcome=" + string(o) + ",provider=" + p + "}"
				want := 0.0
				if p == "acme" && o == metrics.Admitted && c == Background {
					want = 1
				}
				if v, ok := got[name]; !ok || v != want {
					t.Errorf("%s = %v, %v; want %v", name, v, ok, want)
				}
			}
			if _, ok := got["quotagate_wait_seconds{class="+c.String()+",provider="+p+"}_count"]; !ok {
				t.Errorf("no quotagate_wait_seconds series for class %s of %s", c, p)
			}
		}
		for _, c := range []string{"quotagate_refusals_total", "quotagate_budget_observations_total"} {
			name := c + "{provider=" + p + "}"
			want := 0.0
			if (p == "swift" && c == "quotagate_refusals_total") || (p == "ups" && c == "quotagate_budget_observations_total") {
				want = 1
			}
			if v, ok := got[name]; !ok || v != want {
				t.Errorf("%s = %v, %v; want %v", name, v, ok, want)
			}
		}
		if v, ok := got["quotagate_paused_scopes{provider="+p+"}"]; !ok || v != 0 {
			t.Errorf("quotagate_paused_scopes{provider=%s} = %v, %v; want 0", p, v, ok)
		}
	}
}
