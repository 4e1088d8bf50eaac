package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the test binary if a goroutine outlives the tests: the
// demo starts gates, asynq servers and HTTP servers, and stops them all.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
