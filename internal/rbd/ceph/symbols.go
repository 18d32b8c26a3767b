package ceph

/*
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>

// rbdcsi_defined is 1 when a library in the process's global scope (the
// librbd the program was linked with) defines the symbol name.
static int rbdcsi_defined(const char *name) {
	return dlsym(RTLD_DEFAULT, name) != NULL;
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// defined reports whether the linked librbd (or another loaded library)
// has the C function name. go-ceph calls the functions newer than its
// build tag's release through such a lookup; asking first tells what the
// library can do without calling it.
func defined(name string) bool {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	return C.rbdcsi_defined(cname) != 0
}

// groupSnapshotSupport is nil when has finds every librbd call that group
// snapshots need beyond what Pacific has: cloning by snapshot ID
// (rbd_clone4) and reading a group snapshot's image snapshots
// (rbd_group_snap_get_info), both from Squid 19 on. Otherwise it is
// rbd.ErrNotSupported naming the first one missing.
func groupSnapshotSupport(has func(name string) bool) error {
	for _, fn := range []string{"rbd_clone4", "rbd_group_snap_get_info", "rbd_group_snap_get_info_cleanup"} {
		if !has(fn) {
			return fmt.Errorf("%w: librbd lacks %s (Squid 19 or newer needed)", rbd.ErrNotSupported, fn)
		}
	}
	return nil
}
