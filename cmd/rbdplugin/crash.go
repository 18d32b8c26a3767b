package main

import (
	"syscall"

	"k8s.io/klog/v2"
)

// crashEnv must be 1 for --test-crash-at to be accepted, so that the flag
// that kills the plugin on purpose cannot be switched on in production by
// an argument alone.
const crashEnv = "RBDCSI_ALLOW_TEST_CRASH"

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
