#!/bin/bash
# Build Soft-iWARP (siw) for the kernel of a Debian guest rootfs and install it
# there. Debian builds no siw (CONFIG_RDMA_SIW is not set in any of its kernels),
# so the upstream driver is compiled out of tree from Debian's own
# linux-source-<major.minor> against linux-headers of exactly the guest's kernel,
# in a throw-away build chroot made with mmdebstrap (Debian packages only; the
# guest gets no compiler).
#
# Usage: test/e2e/siw.sh ROOTFS SOURCES
#   ROOTFS   the guest tree (an mmdebstrap customize hook passes "$1")
#   SOURCES  the deb822 apt sources the guest was built from
#
# Result: ROOTFS/lib/modules/<kver>/updates/siw.ko, registered with depmod, so
# `modprobe siw` and `rdma link add ... type siw` (module alias rdma-link-siw)
# load it. See docs/e2e.md.
set -euo pipefail

root=${1:?usage: siw.sh ROOTFS SOURCES}
sources=${2:?usage: siw.sh ROOTFS SOURCES}

# The guest's kernel: exactly one image package is installed.
kernels=("$root"/lib/modules/*/kernel)
((${#kernels[@]} == 1)) || { echo "siw: expected one kernel in $root, found: ${kernels[*]}" >&2; exit 1; }
kver=$(basename "$(dirname "${kernels[0]}")")
pkgver=$(chroot "$root" dpkg-query -W -f '${Version}' "linux-image-$kver")
major=${kver%%-*}        # 6.12.117+deb13
major=${major%.*}        # 6.12
if [[ -e $root/lib/modules/$kver/kernel/drivers/infiniband/sw/siw ]]; then
	echo "siw: $kver already ships siw; nothing to build" >&2
	exit 0
fi
echo "siw: building for linux-image-$kver $pkgver from linux-source-$major $pkgver" >&2

build=$(mktemp -d "${TMPDIR:-/var/tmp}/rdmad-e2e-siw.XXXXXX")
trap 'rm -rf "$build"' EXIT

# Pinned to the guest's package version: the headers' Module.symvers and
# vermagic must be the guest kernel's, and linux-source of the same upload is
# the code that kernel was built from. A mirror that moved on in between fails
# here, loudly, instead of producing a module the kernel refuses.
mmdebstrap --variant=apt --quiet \
	--include="linux-headers-$kver=$pkgver,linux-source-$major=$pkgver,make,xz-utils" \
	--aptopt='Acquire::Retries "3"' \
	--dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-exclude=/usr/share/man/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' \
	"$(chroot "$root" sh -c '. /etc/os-release; echo "$VERSION_CODENAME"')" \
	"$build/chroot" "$sources" >&2

src=linux-source-$major
tar -C "$build/chroot/tmp" -xJf "$build/chroot/usr/src/$src.tar.xz" "$src/drivers/infiniband/sw/siw"
chroot "$build/chroot" make -s -C "/usr/src/linux-headers-$kver" \
	M="/tmp/$src/drivers/infiniband/sw/siw" CONFIG_RDMA_SIW=m modules >&2

ko=$build/chroot/tmp/$src/drivers/infiniband/sw/siw/siw.ko
vermagic=$(chroot "$build/chroot" modinfo -F vermagic "/tmp/$src/drivers/infiniband/sw/siw/siw.ko")
[[ $vermagic == "$kver "* ]] || { echo "siw: built for '$vermagic', guest runs $kver" >&2; exit 1; }

# updates/ takes precedence over the distribution's tree in depmod's search
# order, the usual place for an out-of-tree module. Debug info is 5 of its 6 MB.
chroot "$build/chroot" strip --strip-debug "/tmp/$src/drivers/infiniband/sw/siw/siw.ko"
install -D -m 0644 "$ko" "$root/lib/modules/$kver/updates/siw.ko"
chroot "$root" depmod -a "$kver"
chroot "$root" modinfo -k "$kver" -F filename siw >&2
