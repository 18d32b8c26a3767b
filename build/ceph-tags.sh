#!/bin/sh
# ceph-tags.sh: the go-ceph build tag for the librbd installed here, so one
# source builds against every Ceph release's headers (Makefile, the Ceph
# matrix, build/Dockerfile). go-ceph v0.40 targets the newest releases with
# no tag (Squid, Tentacle) and the older ones with their release's name; it
# looks up newer librbd calls at run time.
# Prints the tag, or nothing for the newest; fails without librbd-dev.
set -eu
v=$(dpkg-query -W -f='${Version}' librbd-dev 2>/dev/null) || {
	echo "ceph-tags.sh: librbd-dev is not installed" >&2
	exit 1
}
major=${v#*:}
major=${major%%.*}
case $major in
16) echo pacific ;;
17) echo quincy ;;
18) echo reef ;;
1[0-5] | [0-9])
	echo "ceph-tags.sh: librbd-dev $v is older than go-ceph supports" >&2
	exit 1
	;;
*) echo "" ;;
esac
