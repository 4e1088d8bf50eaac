package failover

import (
	"testing"

	"github.com/quotagate/quotagate/internal/redistest"
)

// TestMain runs the package's tests, then no goroutine (a re-assertion
// run, a probe's timer) may be left.
func TestMain(m *testing.M) { redistest.Main(m, redistest.NoLeaks()) }
