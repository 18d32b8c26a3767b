//go:build faultinject

package main

import (
	"flag"
	"fmt"
	"os"
	"syscall"

	"k8s.io/klog/v2"
)

// The fault hooks are compiled in only with the faultinject build tag: the
// project's test builds (make build, scripts/suite.sh build) have it, the
// image (build/Dockerfile) does not. Even then crashEnv must be 1 for
// --test-crash-at to be accepted, so an argument alone cannot switch on
// the flag that kills the plugin on purpose.
const crashEnv = "RBDCSI_ALLOW_TEST_CRASH"

// addCrashFlag registers --test-crash-at, stored in point.
func addCrashFlag(fs *flag.FlagSet, point *string) {
	fs.StringVar(point, "test-crash-at", "", "for crash tests only (and only with "+crashEnv+"=1): kill the plugin (SIGKILL) when an operation reaches this point")
}

// checkCrashFlag refuses --test-crash-at outside the crash tests.
func checkCrashFlag(point string) error {
	if point != "" && os.Getenv(crashEnv) != "1" {
		return fmt.Errorf("--test-crash-at is for the project's crash tests only: it needs %s=1 in the environment", crashEnv)
	}
	return nil
}

// crashAt returns the fault hook of --test-crash-at: at the named point the
// process kills itself as hard as a node failure would, so crash tests land
// exactly inside an operation instead of relying on timing.
func crashAt(point string) func(string) {
	if point == "" {
		return nil
	}
	return func(reached string) {
		if reached == point {
			klog.InfoS("crashing on purpose (--test-crash-at)", "point", point)
			klog.Flush()
			_ = syscall.Kill(syscall.Getpid(), syscall.SIGKILL)
			select {} // SIGKILL cannot be caught; never go on
		}
	}
}
