#!/usr/bin/env bash
# kernel-vm.sh: a real Debian kernel under QEMU, for the tests that need
# kernel drivers this machine's own kernel lacks (krbd, nbd, dm-crypt, online
# resize). The kernel package is downloaded and unpacked into a cache outside
# the repository, never installed on the host; the guest's userland is the
# /usr and /etc of a root on the host ($VM_USERLAND: a cached Debian root,
# scripts/rootfs.sh; default: the host's own), shared read-only by
# virtio-9p, so the Ceph tools the tests run are that root's.
#
#   kernel-vm.sh kernel               fetch (once) and print the kernel's directory
#   kernel-vm.sh initramfs OUT        busybox + scripts/vm-init.sh + the modules, into OUT
#   kernel-vm.sh boot KDIR INITRD IP TAP JOBDIR [HOSTDIR...]
#        boot a guest on tap device TAP with address IP (ADDR/LEN), share
#        JOBDIR and each HOSTDIR read-write at the same path, run JOBDIR/run.sh
#        in it and exit with its status. The console goes to stdout.
#
# Environment: VM_USERLAND (default /), RBDCSI_KERNEL_CACHE (default /var/cache/rbdcsi-kernel),
# VM_CPU (QEMU's -cpu, default max), VM_MEMORY (MiB, default 1536), VM_CPUS (default 2), VM_TIMEOUT (seconds,
# default 2700: a hung guest is killed).
set -euo pipefail

readonly PROG=${0##*/}
HERE=$(cd "$(dirname "$0")" && pwd)
readonly HERE
CACHE=${RBDCSI_KERNEL_CACHE:-/var/cache/rbdcsi-kernel}
readonly CACHE
# qemu-system-x86 runs the guest, busybox-static is its init's userland,
# cpio packs the initramfs; apt-get download and dpkg -x are in base.
readonly KERNEL_PACKAGES=(qemu-system-x86 busybox-static cpio)
# What the tests load in the guest; dependencies come from modprobe.
# dm-crypt finds its cipher modes and cryptsetup its keyslot cipher (AF_ALG)
# by name: the guest has no modprobe to load them on demand. loop and fuse
# serve the fuse mapper under an encrypted volume.
# aesni_intel gives dm-crypt and cryptsetup AES-NI (the emulated CPU has it,
# below); crc32c_intel, which rbd pulls in, libceph's checksums SSE4.2.
readonly MODULES=(virtio_pci virtio_net virtio_rng 9pnet_virtio 9p rbd nbd ext4 xfs dm_crypt xts aesni_intel algif_skcipher loop fuse)

# shellcheck source=scripts/lib.sh
source "$HERE/lib.sh"

# kernel: Debian 12's current kernel package (what linux-image-amd64 points
# at), unpacked with its modules indexed. Prints the directory: it holds
# vmlinuz, version and root/ (the package's files).
kernel() {
	local pkg ver dir deb
	need_packages "${KERNEL_PACKAGES[@]}"
	pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9].*\)$/\1/p' | head -1)
	if [[ -z $pkg ]]; then
		apt-get update -qq
		pkg=$(apt-cache depends linux-image-amd64 | sed -n 's/^ *Depends: \(linux-image-[0-9].*\)$/\1/p' | head -1)
	fi
	[[ $pkg =~ ^linux-image-([0-9][a-z0-9.+-]*)$ ]] || die "cannot tell Debian's kernel package (apt-cache depends linux-image-amd64)"
	ver=${BASH_REMATCH[1]}
	dir=$CACHE/$pkg
	if [[ -f $dir/complete ]]; then
		echo "$dir"
		return
	fi
	rm -rf "$dir" "$dir.tmp"
	mkdir -p "$dir.tmp/root"
	log "fetching $pkg (once; cached in $CACHE)"
	(cd "$dir.tmp" && apt-get download -qq "$pkg") || die "apt-get download $pkg failed"
	deb=$(echo "$dir.tmp"/*.deb)
	dpkg -x "$deb" "$dir.tmp/root"
	rm -f "$deb"
	depmod -b "$dir.tmp/root" "$ver"
	ln -s "root/boot/vmlinuz-$ver" "$dir.tmp/vmlinuz"
	echo "$ver" >"$dir.tmp/version"
	date -u +%FT%TZ >"$dir.tmp/complete"
	mv "$dir.tmp" "$dir"
	echo "$dir"
}

# initramfs OUT: /init is scripts/vm-init.sh; modules.order lists the .ko
# files in insmod order (modprobe --show-depends, deduplicated).
initramfs() {
	local out=$1 kdir ver stage m f
	kdir=$(kernel)
	ver=$(<"$kdir/version")
	stage=$(mktemp -d)
	# shellcheck disable=SC2064 # expand now: stage is local
	trap "rm -rf '$stage'" RETURN
	mkdir -p "$stage/bin" "$stage/proc" "$stage/sys" "$stage/dev" "$stage/newroot"
	cp /bin/busybox "$stage/bin/busybox"
	cp "$HERE/vm-init.sh" "$stage/init"
	chmod 0755 "$stage/init"
	for m in "${MODULES[@]}"; do
		modprobe -d "$kdir/root" -S "$ver" --show-depends "$m" || die "no module $m in $ver"
	done | awk '$1 == "insmod" && !seen[$2]++ {print $2}' | while read -r f; do
		f=${f#"$kdir/root"}
		mkdir -p "$stage$(dirname "$f")"
		cp "$kdir/root$f" "$stage$f"
		echo "${f#/}" >>"$stage/modules.order"
	done
	(cd "$stage" && find . | cpio -o -H newc --quiet | gzip -1) >"$out"
}

# boot KDIR INITRD IP TAP JOBDIR [HOSTDIR...]
boot() {
	(($# >= 5)) || die "usage: $PROG boot KDIR INITRD IP TAP JOBDIR [HOSTDIR...]"
	local kdir=$1 initrd=$2 ip=$3 tap=$4 job=$5 shares="" n=0 d mac user=${VM_USERLAND:-/}
	shift 5
	[[ -f $job/run.sh ]] || die "no $job/run.sh"
	user=${user%/}
	[[ -z $user || ($user == /* && $user != *[,=\ ]* && -x $user/usr/bin/env) ]] ||
		die "VM_USERLAND must be an absolute path to a root with /usr/bin/env, without commas, = or spaces: $user"
	rm -f "$job/rc"
	# -cpu max: every instruction QEMU's emulator knows (SSE4.2, AES-NI,
	# PCLMULQDQ), so checksums and ciphers in the guest's kernel and Ceph
	# run as one emulated instruction each rather than as emulated table
	# code; the default CPU (qemu64) has none of them.
	local args=(-accel tcg -cpu "${VM_CPU:-max}" -m "${VM_MEMORY:-1536}" -smp "${VM_CPUS:-2}" -nographic -no-reboot
		-kernel "$kdir/vmlinuz" -initrd "$initrd"
		-device virtio-rng-pci
		-virtfs "local,path=$user/usr,mount_tag=usr,security_model=none,readonly=on"
		-virtfs "local,path=$user/etc,mount_tag=etc,security_model=none,readonly=on")
	for d in "$job" "$@"; do
		[[ $d == /* && $d != *[,=\ ]* ]] || die "share paths must be absolute, without commas, = or spaces: $d"
		args+=(-virtfs "local,path=$d,mount_tag=s$n,security_model=none")
		shares+=${shares:+,}s$n=$d
		n=$((n + 1))
	done
	# A MAC per tap device, so two guests on one bridge differ.
	mac=$(printf '52:54:00:%02x:%02x:%02x' $((RANDOM % 256)) $((RANDOM % 256)) $((RANDOM % 256)))
	args+=(-netdev "tap,id=n0,ifname=$tap,script=no,downscript=no" -device "virtio-net-pci,netdev=n0,mac=$mac")
	args+=(-append "console=ttyS0 panic=-1 quiet rbdcsi.ip=$ip rbdcsi.shares=$shares rbdcsi.job=$job")
	# --foreground keeps QEMU in this script's process group, so a caller
	# that ends the group ends QEMU too.
	timeout --foreground --kill-after=10 "${VM_TIMEOUT:-2700}" qemu-system-x86_64 "${args[@]}" </dev/null ||
		log "qemu exited with $? (124: killed after ${VM_TIMEOUT:-2700} s)"
	[[ -f $job/rc ]] || die "the guest ended without running its job to the end"
	return "$(<"$job/rc")"
}

case ${1:-} in
kernel) kernel ;;
initramfs)
	(($# == 2)) || die "usage: $PROG initramfs OUT"
	initramfs "$2"
	;;
boot)
	shift
	boot "$@"
	;;
*) die "usage: $PROG kernel | initramfs OUT | boot KDIR INITRD IP TAP JOBDIR [HOSTDIR...]" ;;
esac
