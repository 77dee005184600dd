#!/bin/bash
# demo-bus.sh ROOT CONFIG: the D-Bus part of `make demo`. Starts a private
# dbus-daemon, rdmad on the fixture ROOT with CONFIG, shows rdmactl status
# and the busctl tree, persists a RoCE change, restarts rdmad and shows the
# value is back. Everything started here is stopped on exit, even on failure.
# Expects rdmad and rdmactl in PATH (or RDMAD/RDMACTL set).
set -euo pipefail
root=${1:?usage: demo-bus.sh ROOT CONFIG}
config=${2:?usage: demo-bus.sh ROOT CONFIG}
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

sed "s|@SOCKET@|$work/bus.sock|" "$here/bus/bus.conf.in" >"$work/bus.conf"
dbus-daemon --config-file "$work/bus.conf" --nofork --nopidfile --print-address >"$work/address" &
pids+=($!)
for _ in $(seq 50); do [[ -s $work/address ]] && break; sleep 0.1; done
addr=$(head -n1 "$work/address")
echo "== private bus: $addr"

start_rdmad() {
    "$RDMAD" --root "$root" --config "$config" --bus "$addr" 2>>"$work/rdmad.log" &
    rdmad_pid=$!
    pids+=($rdmad_pid)
    for _ in $(seq 100); do
        "$RDMACTL" --bus "$addr" status >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    echo "rdmad did not come up:" >&2; cat "$work/rdmad.log" >&2; return 1
}

start_rdmad
echo "== rdmactl status"; "$RDMACTL" --bus "$addr" status
echo "== busctl tree org.rdmad1"; busctl --address="$addr" tree org.rdmad1
echo "== rdmactl roce set mlx5_0/1 --mode v1 --persist"
"$RDMACTL" --bus "$addr" roce set mlx5_0/1 --mode v1 --persist
"$RDMACTL" --bus "$addr" status
echo "== restart rdmad"
kill "$rdmad_pid"; wait "$rdmad_pid" 2>/dev/null || true
start_rdmad
echo "== rdmactl roce show mlx5_0/1 after the restart"
"$RDMACTL" --bus "$addr" roce show mlx5_0/1
