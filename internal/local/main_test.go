package local

import (
	"testing"

	"github.com/quotagate/quotagate/internal/redistest"
)

// TestMain runs the package's tests, then no goroutine (an open cache's
// watcher) may be left.
func TestMain(m *testing.M) { redistest.Main(m, redistest.NoLeaks()) }
