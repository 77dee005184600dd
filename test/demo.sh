#!/usr/bin/env bash
# `make demo`: rdmad's main job on the bundled fixture host (test/hosts/demo:
# two ConnectX-5 RoCE functions, a ConnectX-3 VPI adapter with one InfiniBand
# and one Ethernet port, and a Soft-RoCE device), with the shipped
# configuration plus the example RoCE and lossless RoCE policies. The
# ConnectX-5 netdevs' DCB and ethtool state is the fixture's
# fixture/kernel.json, which rdmad --root serves as DCB netlink and ethtool
# (docs/fixtures.md). No RDMA hardware, no root changes to this machine:
# everything happens in a temporary copy.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-$repo/bin} # make demo builds them there; test/demo_test.go elsewhere
work=$(mktemp -d /tmp/rdmad-demo.XXXXXX)
trap 'rm -rf "$work"' EXIT
root=$work/host

cp -a "$repo/test/hosts/demo" "$root"
mkdir -p "$root/etc/rdma/rdmad.d"
cp "$repo/etc/rdma/rdmad.toml" "$root/etc/rdma/rdmad.toml"
cp "$repo/docs/examples/50-roce.toml" "$repo/docs/examples/60-lossless.toml" "$root/etc/rdma/rdmad.d/"

# modprobe stand-in, first in PATH: says what it would load and lists the
# modules in the fixture's proc/modules, as a real load would.
mkdir -p "$work/bin"
cat > "$work/bin/modprobe" <<EOS
#!/bin/sh

for m in "\$@"; do
	case \$m in -*) continue ;; esac # -a, --
	echo "\$m 16384 0 - Live 0x0" >> "$root/proc/modules"
done
EOS
chmod +x "$work/bin/modprobe"
export PATH="$work/bin:$PATH"

heading() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

show_host() {
	printf '  %-10s %-12s %-11s %-12s %s\n' PORT LINK_LAYER NETDEV ROCE_MODE TOS
	local d p dev port ll nd
	for d in "$root"/sys/class/infiniband/*; do
		dev=$(basename "$d")
		for p in "$d"/ports/*; do
			port=$(basename "$p")
			ll=$(cat "$p/link_layer" 2>/dev/null || echo -)
			nd=$(cat "$p"/gid_attrs/ndevs/0 2>/dev/null || echo -)
			local cfs=$root/sys/kernel/config/rdma_cm/$dev/ports/$port
			printf '  %-10s %-12s %-11s %-12s %s\n' "$dev/$port" "$ll" "$nd" \
				"$(cat "$cfs/default_roce_mode" 2>/dev/null || echo -)" "$(cat "$cfs/default_roce_tos" 2>/dev/null || echo -)"
		done
	done
	printf '  memlock file: '
	if [ -f "$root/etc/security/limits.d/90-rdmad-memlock.conf" ]; then
		echo; grep -v '^#' "$root/etc/security/limits.d/90-rdmad-memlock.conf" | sed 's/^/    /'
	else
		echo "(none)"
	fi
	printf '  modules loaded: %s\n' "$(cut -d' ' -f1 "$root/proc/modules" | tr '\n' ' ')"
	show_qos
}

# show_qos: the DCB and ethtool state of the netdevs that have DCB, from the
# fixture's kernel state (what `dcb` and `ethtool -a` would show).
show_qos() { awk -f "$repo/test/fixture-state.awk" "$root/fixture/kernel.json"; }

heading "Part 1: rdmad --once. Policy: the shipped /etc/rdma/rdmad.toml plus these drop-ins (rdmad.d/50-roce.toml, rdmad.d/60-lossless.toml)"
grep -hv '^#' "$root/etc/rdma/rdmad.d/50-roce.toml" "$root/etc/rdma/rdmad.d/60-lossless.toml" | sed '/^$/d; s/^/  /'

heading "Before: the host as the kernel leaves it at boot"
show_host

heading "rdmad --root <fixture> --once"
"$bin/rdmad" --root "$root" --once | sed "s|$root||g; s/^/  /"

heading "After"
show_host

heading "rdmad --once again: already as declared, nothing is written"
"$bin/rdmad" --root "$root" --once | tail -n 1 | sed 's/^/  /'

heading "Part 2: rdmad as a daemon on a private D-Bus, seen through rdmactl and busctl"
root=$work/host2
cp -a "$repo/test/hosts/demo" "$root"
mkdir -p "$root/etc/rdma/rdmad.d"
cp "$repo/etc/rdma/rdmad.toml" "$root/etc/rdma/rdmad.toml"
# This boot's id: what rdmad finds before its first change is kept for the
# boot it was found in, and put back when a declaration goes.
mkdir -p "$root/proc/sys/kernel/random"
echo 6c1f0e4a-9b7d-4e2c-8a35-d0f1e2a3b4c5 >"$root/proc/sys/kernel/random/boot_id"
sed -i "s|$work/host/|$root/|" "$work/bin/modprobe"
RDMAD=$bin/rdmad RDMACTL=$bin/rdmactl "$repo/test/demo-bus.sh" "$root" "$repo/docs/examples/50-roce.toml" "$repo/docs/examples/60-lossless.toml" 2>&1 |
	awk -v root="$root" -f "$repo/test/unroot.awk"
