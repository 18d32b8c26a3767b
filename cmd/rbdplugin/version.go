package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set at link time (-ldflags "-X main.version=... -X main.commit=...
// -X main.librbd=..."): build/Dockerfile, the Makefile and scripts/suite.sh
// do. librbd is the version of the librbd-dev package the binary was built
// against: go-ceph's build tag follows it, so it says which Ceph features
// the binary can use.
var (
	version = "dev"
	commit  = "unknown"
	librbd  = "unknown"
)

// versionLine is what --version prints.
func versionLine() string {
	goCeph := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "github.com/ceph/go-ceph" {
				goCeph = m.Version
			}
		}
	}
	return fmt.Sprintf("rbdplugin %s (commit %s), built against librbd %s with go-ceph %s, %s",
		version, commit, librbd, goCeph, runtime.Version())
}
