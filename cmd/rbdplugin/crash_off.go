//go:build !faultinject

package main

import "flag"

// A build without the faultinject tag (the image's) has no fault hooks:
// no --test-crash-at, no code that kills the plugin on purpose.

func addCrashFlag(*flag.FlagSet, *string) {}

func checkCrashFlag(string) error { return nil }

func crashAt(string) func(string) { return nil }
