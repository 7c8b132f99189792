package main

import (
	"testing"

	"github.com/holter-dev/holter/internal/testutil"
)

// TestMain lets the tests share one build of each command they run
// (testutil.BuildHolter).
func TestMain(m *testing.M) { testutil.Main(m) }
