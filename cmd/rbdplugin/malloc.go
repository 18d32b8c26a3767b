package main

// #include <malloc.h>
import "C"

import "os"

// mallocArenas bounds glibc's malloc arenas. glibc gives each thread that
// calls into librados/librbd an arena of its own, up to eight per core:
// hundreds on a large node, for a plugin that runs a thread per
// concurrent Ceph call. Eight keep the threads of 16 concurrent calls
// from queueing on arena locks (make bench on 2 cores: two arenas cost
// 10% of CreateVolume/s at c=16 and four 5%, against about 1 MiB of peak
// memory saved) and bound the memory on any node. Set here rather than in
// the container image so every way of running the plugin gets it; an
// explicit MALLOC_ARENA_MAX in the environment still wins.
const mallocArenas = 8

func limitMallocArenas() {
	if os.Getenv("MALLOC_ARENA_MAX") == "" {
		C.mallopt(C.M_ARENA_MAX, mallocArenas)
	}
}
