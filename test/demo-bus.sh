#!/bin/bash
# demo-bus.sh ROOT DROPIN [LOSSLESS]: the daemon part of `make demo`.
# Starts a private dbus-daemon and rdmad on the fixture ROOT (configured
# with the shipped rdmad.toml only), shows `rdmactl status` before and after
# the RoCE policy DROPIN is added and reloaded, the busctl tree, a persisted
# change, that it is back after restarting rdmad, and its withdrawal. With
# LOSSLESS (a [[qos]] drop-in), also `rdmactl qos show` before and after it,
# another tool's change of the fixture's DCB state corrected, and what rdmad
# found put back when the drop-in goes. Everything started here is stopped
# on exit, even on failure. rdmad and rdmactl come from PATH (or
# RDMAD/RDMACTL).
set -euo pipefail
root=${1:?usage: demo-bus.sh ROOT DROPIN}
dropin=${2:?usage: demo-bus.sh ROOT DROPIN}
lossless=${3:-}
RDMAD=${RDMAD:-rdmad}
RDMACTL=${RDMACTL:-rdmactl}
here=$(cd "$(dirname "$0")" && pwd)

work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

sed "s|@SOCKET@|$work/bus.sock|" "$here/bus/bus.conf.in" >"$work/bus.conf"
# dbus-daemon warns that it cannot raise its fd limit when not run as root; harmless.
dbus-daemon --config-file "$work/bus.conf" --nofork --nopidfile --print-address >"$work/address" 2>"$work/dbus.log" &
pids+=($!)
for _ in $(seq 50); do [[ -s $work/address ]] && break; sleep 0.1; done
addr=$(head -n1 "$work/address")
ctl() { "$RDMACTL" --bus "$addr" "$@"; }

start_rdmad() {
	"$RDMAD" --root "$root" --bus "$addr" 2>>"$work/rdmad.log" &
	rdmad_pid=$!
	pids+=($rdmad_pid)
	# rdmad takes its bus name only after its first pass: once the name
	# answers, the state is complete.
	for _ in $(seq 100); do
		ctl status >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "rdmad did not come up:" >&2
	cat "$work/rdmad.log" >&2
	return 1
}

step "rdmad --root <fixture> --bus <private bus>, shipped rdmad.toml only (no RoCE policy yet)"
start_rdmad
step "Before: rdmactl status"
ctl status

step "Add the RoCE policy as a drop-in and reload: rdmactl reload"
cp "$dropin" "$root/etc/rdma/rdmad.d/"
ctl reload
step "After: rdmactl status"
ctl status

if [[ -n $lossless ]]; then
	step "Before: rdmactl qos show mlx5_0 (the ConnectX-5 as mlx5 reports it after boot)"
	ctl qos show mlx5_0
	step "Add the lossless RoCE policy and reload: rdmactl reload"
	grep -v '^#' "$lossless" | sed '/^$/d; s/^/  /'
	cp "$lossless" "$root/etc/rdma/rdmad.d/"
	ctl reload
	step "After: rdmactl qos show mlx5_0"
	ctl qos show mlx5_0

	step "Another tool turns ens1f0np0 back to PCP trust (deletes its DSCP entries) behind rdmad's back"
	state=$root/fixture/kernel.json
	awk -v clear_app=ens1f0np0 -f "$here/fixture-state.awk" "$state" >"$state.other"
	mv "$state.other" "$state"
	for _ in $(seq 100); do grep -q "setting=qos_trust" "$work/rdmad.log" && break; sleep 0.1; done
	echo "rdmad's log:"
	grep -o 'msg="corrected a setting.*setting=qos_trust found=[a-z]* restored=[a-z]*' "$work/rdmad.log" | sed 's/^msg=/  /'
	ctl qos show mlx5_0/1 >"$work/qos"
	head -n 2 "$work/qos"
fi

step "busctl tree org.rdmad1"
busctl --address="$addr" tree org.rdmad1
step "busctl introspect org.rdmad1 /org/rdmad1/devices/mlx5_5f0/ports/1 org.rdmad1.Port"
busctl --address="$addr" introspect org.rdmad1 /org/rdmad1/devices/mlx5_5f0/ports/1 org.rdmad1.Port

step "rdmactl roce set mlx5_0/1 --mode v1 --persist (written to rdmad.d/zz-rdmad-persist.toml)"
ctl roce set mlx5_0/1 --mode v1 --persist
ctl roce show mlx5_0/1

step "Restart rdmad after the kernel forgot (configfs reset as by a reboot)"
kill "$rdmad_pid"
wait "$rdmad_pid" 2>/dev/null || true
echo "RoCE v2" >"$root/sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_mode"
echo 0 >"$root/sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos"
start_rdmad
ctl roce show mlx5_0/1

step "rdmactl roce unset mlx5_0/1 --persist (the files decide again; doctor warned of the override)"
ctl roce unset mlx5_0/1 --persist
ctl roce show mlx5_0/1

step "rdmactl -o json device show mlx5_0 (first lines)"
ctl -o json device show mlx5_0 | head -n 12

step "rdmactl doctor: is this host's RDMA healthy? (rdmad checks the fixture host; exit 1 means a finding failed)"
ctl doctor || true

if [[ -n $lossless ]]; then
	step "Remove the lossless RoCE policy and reload: rdmad puts back what it found"
	rm "$root/etc/rdma/rdmad.d/$(basename "$lossless")"
	ctl reload
	for _ in $(seq 100); do
		ctl qos show mlx5_0/1 >"$work/qos"
		grep -q 'mlx5_0/1 *ens1f0np0 *pcp' "$work/qos" && break
		sleep 0.1
	done
	ctl qos show mlx5_0
fi
