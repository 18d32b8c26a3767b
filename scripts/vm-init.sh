#!/bin/busybox sh
# shellcheck shell=sh
# vm-init.sh: /init of the kernel-test guest's initramfs (busybox sh; see
# scripts/kernel-vm.sh). It loads the modules the test needs, brings up the
# network, builds a root from a host root's /usr and /etc (virtio-9p, read-only)
# plus tmpfs, mounts the job's shares at the host paths they come from, runs
# the job script in a chroot, records its exit code in the job directory and
# powers off. Kernel command line:
#   rbdcsi.ip=ADDR/LEN            eth0's address
#   rbdcsi.shares=TAG=PATH,...    9p shares, mounted at PATH in the root
#   rbdcsi.job=PATH               a shared directory holding run.sh; rc is written there
/bin/busybox --install -s /bin
export PATH=/bin

mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev

# modules.order: one path per line, dependencies first. Every module must
# load: a test that needs a missing one would skip, and the step's test list
# (scripts/kernel-test.tests) would catch it late; the boot stops here with
# the error instead. One may fail by design: crc32c-intel, which needs
# SSE4.2, a flag QEMU's emulated CPU lacks (crc32c_generic serves instead).
failed=
while read -r m; do
	name=$(basename "$m" .ko | tr - _)
	if ! err=$(insmod "/$m" 2>&1); then
		case $name in
		crc32c_intel | aesni_intel) echo "vm-init: $name not loaded (the emulated CPU lacks its instructions: VM_CPU): $err" ;;
		*)
			echo "vm-init: insmod $m failed: $err"
			failed="$failed $name"
			;;
		esac
	fi
done </modules.order
if [ -n "$failed" ]; then
	echo "vm-init: modules that did not load:$failed; not running the job"
	# No rc file: the host reports that the guest did not run its job, and
	# prints this console.
	reboot -f
fi

arg() { tr ' ' '\n' </proc/cmdline | sed -n "s/^rbdcsi\.$1=//p"; }
ip=$(arg ip)
shares=$(arg shares)
job=$(arg job)

ip link set lo up
ip addr add "$ip" dev eth0
ip link set eth0 up

R=/newroot
mkdir -p $R/usr $R/etc $R/proc $R/sys $R/dev $R/tmp $R/run $R/var $R/root $R/mnt
p9="trans=virtio,version=9p2000.L,msize=262144,cache=loose"
mount -t 9p -o "$p9,ro" usr $R/usr
mount -t 9p -o "$p9,ro" etc $R/etc
# Debian's merged /usr.
for d in bin sbin lib lib64; do ln -s "usr/$d" "$R/$d"; done
for d in tmp run var root mnt; do mount -t tmpfs -o mode=0755 tmpfs "$R/$d"; done
chmod 1777 $R/tmp
mkdir -p $R/var/tmp $R/var/lib $R/var/log $R/var/run $R/run/lock
chmod 1777 $R/var/tmp
mount -t proc proc $R/proc
mount -t sysfs sys $R/sys
mount -o bind /dev $R/dev
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts devpts $R/dev/pts
mount -t tmpfs tmpfs $R/dev/shm
# The job's shares: host paths under /tmp or /work, mounted over the tmpfs.
for s in $(echo "$shares" | tr ',' ' '); do
	tag=${s%%=*}
	path=${s#*=}
	mkdir -p "$R$path"
	mount -t 9p -o "trans=virtio,version=9p2000.L,msize=262144" "$tag" "$R$path"
done

echo "vm-init: $(cut -d' ' -f1 /proc/uptime)s up, running $job/run.sh"
chroot $R /usr/bin/env -i PATH=/usr/sbin:/usr/bin HOME=/root TMPDIR=/tmp /bin/sh "$job/run.sh"
echo $? >"$R$job/rc"
sync
# The host reads rc after QEMU exits; -no-reboot turns the reboot into an exit.
umount -a -r 2>/dev/null
reboot -f
