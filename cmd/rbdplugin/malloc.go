package main

// #include <malloc.h>
import "C"

import "os"

// mallocArenas bounds glibc's malloc arenas. glibc gives each thread that
// calls into librados/librbd an arena of its own (up to eight per core),
// and the plugin runs a thread per concurrent Ceph call, so its peak memory
// grew with concurrency (make bench, P5). Set here rather than in the
// container image so every way of running the plugin gets it; an explicit
// MALLOC_ARENA_MAX in the environment still wins.
const mallocArenas = 2

func limitMallocArenas() {
	if os.Getenv("MALLOC_ARENA_MAX") == "" {
		C.mallopt(C.M_ARENA_MAX, mallocArenas)
	}
}
