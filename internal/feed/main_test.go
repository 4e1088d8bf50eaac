package feed

import (
	"testing"

	"github.com/quotagate/quotagate/internal/redistest"
)

// TestMain runs the package's tests, then no goroutine (a reader's polls)
// may be left.
func TestMain(m *testing.M) { redistest.Main(m, redistest.NoLeaks()) }
