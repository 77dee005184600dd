#!/bin/bash
# Build (or reuse) the cached Debian bookworm root filesystem the e2e VM boots.
#
# Usage: test/e2e/image.sh            prints the path of the cached rootfs tarball
#
# The tarball is keyed by a hash of everything that determines its content
# (package list, this script, the apt sources), so a second run reuses it and a
# change to any input rebuilds it. It lives outside the work tree
# (E2E_CACHE, default /var/cache/rdmad-e2e) and is written atomically.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${E2E_CACHE:-/var/cache/rdmad-e2e}
suite=bookworm

# What the guest needs: an init system with D-Bus and udev, the RDMA userspace
# (rdma-core for /etc/rdma/modules and the rdma group, iproute2 for `rdma`),
# a kernel plus initramfs (virtio_blk and ext4 are modules in Debian's kernel),
# polkit so authorization runs as on a real host, jq to read `-o json`.
packages=(
	systemd systemd-sysv dbus udev kmod iproute2 procps
	rdma-core ibverbs-utils rdmacm-utils
	linux-image-amd64 initramfs-tools
	polkitd jq
)

# Use the apt sources this machine uses for Debian (only the deb.debian.org /
# security entries, not third-party repositories).
sources_file() {
	local f=/etc/apt/sources.list.d/debian.sources
	if [[ -r $f ]]; then
		cat "$f"
	else
		printf 'deb http://deb.debian.org/debian %s main\n' "$suite"
		printf 'deb http://deb.debian.org/debian %s-updates main\n' "$suite"
		printf 'deb http://deb.debian.org/debian-security %s-security main\n' "$suite"
	fi
}

key=$( { printf '%s\n' "${packages[@]}"; cat "$0"; sources_file; } | sha256sum | cut -c1-16)
tarball=$cache/rootfs-$suite-$key.tar

if [[ -s $tarball ]]; then
	echo "$tarball"
	exit 0
fi

mkdir -p "$cache"
tmp=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
sources_file >"$tmp/sources"

start=$SECONDS
echo "image: building $tarball (mmdebstrap, $suite)" >&2
include=$(IFS=,; echo "${packages[*]}")
# --variant=required keeps the image small; the customize hooks make a bootable
# disk: no fstab entries needed (root comes from the kernel command line),
# a fixed hostname, an empty machine-id so systemd generates one at first boot,
# and a console the VM can write to without a getty fighting over it.
mmdebstrap \
	--variant=required \
	--include="$include" \
	--aptopt='Acquire::Retries "3"' \
	--dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-exclude=/usr/share/man/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' \
	--customize-hook='echo rdmad-e2e >"$1/etc/hostname"' \
	--customize-hook=': >"$1/etc/machine-id"' \
	--customize-hook='printf "/dev/vda / ext4 rw,errors=remount-ro 0 1\n" >"$1/etc/fstab"' \
	--customize-hook='chroot "$1" passwd -d root' \
	"$suite" "$tmp/rootfs.tar" "$tmp/sources" >&2

mv "$tmp/rootfs.tar" "$tarball"
echo "image: built in $((SECONDS - start))s" >&2
echo "$tarball"
