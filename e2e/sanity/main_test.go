package sanity

import (
	"os"
	"testing"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// TestMain fails the run if the suite left anything in the pool.
func TestMain(m *testing.M) { os.Exit(harness.CheckPoolAfter(m)) }
