package main

// #include <malloc.h>
import "C"

import "os"

// mallocArenas bounds glibc's malloc arenas. glibc gives each thread that
// calls into librados/librbd an arena of its own, up to eight per core:
// hundreds on a large node, for a plugin that runs a thread per
// concurrent Ceph call. Eight bound that on any node without making the
// threads of many concurrent calls queue on arena locks, as two do, for
// about 1 MiB more peak memory. Set here rather than in the container
// image so every way of running the plugin gets it; an explicit
// MALLOC_ARENA_MAX in the environment still wins.
const mallocArenas = 8

func limitMallocArenas() {
	if os.Getenv("MALLOC_ARENA_MAX") == "" {
		C.mallopt(C.M_ARENA_MAX, mallocArenas)
	}
}
