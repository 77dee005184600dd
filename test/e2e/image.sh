#!/bin/bash
# Build (or reuse) the cached Debian root filesystem an e2e VM boots.
#
# Usage: test/e2e/image.sh [SUITE]    prints the path of the cached rootfs tarball
#   SUITE  bookworm (default; kernel 6.1) or trixie (kernel 6.12, plus an
#          out-of-tree Soft-iWARP module built by siw.sh)
#
# The tarball is keyed by a hash of everything that determines its content
# (suite, package list, these scripts, the apt sources), so a second run reuses
# it and a change to any input rebuilds it. It lives outside the work tree
# (E2E_CACHE, default /var/cache/rdmad-e2e) and is written atomically.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${E2E_CACHE:-/var/cache/rdmad-e2e}
suite=${1:-bookworm}
case $suite in
bookworm | trixie) ;;
*) echo "image: unknown suite '$suite' (bookworm or trixie)" >&2; exit 2 ;;
esac

# What the guest needs: an init system with D-Bus and udev, the RDMA userspace
# (rdma-core for /etc/rdma/modules and the rdma group, iproute2 for `rdma`),
# a kernel plus initramfs (virtio_blk and ext4 are modules in Debian's kernel),
# polkit so authorization runs as on a real host, jq to read `-o json`.
# ibverbs-utils, rdmacm-utils and perftest are the tools rdmactl verify runs
# (the package recommends them).
packages=(
	systemd systemd-sysv dbus udev kmod iproute2 procps
	rdma-core ibverbs-utils rdmacm-utils perftest
	linux-image-amd64 initramfs-tools
	polkitd jq
)
# The bookworm guest also runs the Ansible playbook (contrib/ansible) with
# `ansible-playbook -c local`: ansible-core is the oldest release the role
# supports (2.14); its apt module needs python3-apt to install a .deb. One
# suite is enough and keeps the other image and its boots lean (docs/e2e.md).
if [[ $suite == bookworm ]]; then
	packages+=(ansible-core python3-apt)
fi
# The trixie guest runs a one-node Slurm cluster (slurmctld, slurmd, munge)
# for contrib/slurm's health check; its units start only once the scenario
# writes slurm.conf (ConditionPathExists).
# It also runs dbus-broker as its system bus (run.sh enables it), as RHEL 9
# and Fedora do; the bookworm guest keeps dbus-daemon, so both are covered.
if [[ $suite == trixie ]]; then
	packages+=(slurm-wlm munge dbus-broker)
fi

# Use the apt sources this machine uses for Debian (only the deb.debian.org /
# security entries, not third-party repositories), with the host's release
# name replaced by the guest's: same mirrors, same keyring.
sources_file() {
	local f=/etc/apt/sources.list.d/debian.sources host=
	host=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
	if [[ -r $f && -n $host ]] && grep -qE "^Suites:.*\b$host\b" "$f"; then
		sed -E "/^Suites:/ s/\b$host(-|\b)/$suite\1/g" "$f"
	else
		printf 'deb http://deb.debian.org/debian %s main\n' "$suite"
		printf 'deb http://deb.debian.org/debian %s-updates main\n' "$suite"
		printf 'deb http://deb.debian.org/debian-security %s-security main\n' "$suite"
	fi
}

key=$( { echo "$suite"; printf '%s\n' "${packages[@]}"; cat "$0" "$here/siw.sh"; sources_file; } | sha256sum | cut -c1-16)
tarball=$cache/rootfs-$suite-$key.tar

if [[ -s $tarball ]]; then
	echo "$tarball"
	exit 0
fi

mkdir -p "$cache"
tmp=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
sources_file >"$tmp/sources"

# Debian builds no siw; the trixie guest gets the upstream module built out of
# tree (siw.sh) so Soft-iWARP is tested on a real kernel.
hooks=()
if [[ $suite == trixie ]]; then
	hooks+=(--customize-hook="\"$here/siw.sh\" \"\$1\" \"$tmp/sources\"")
fi

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
	"${hooks[@]}" \
	"$suite" "$tmp/rootfs.tar" "$tmp/sources" >&2

mv "$tmp/rootfs.tar" "$tarball"
echo "image: built in $((SECONDS - start))s" >&2
echo "$tarball"
