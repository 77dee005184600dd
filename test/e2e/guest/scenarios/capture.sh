# Sourced by rdmad-e2e.sh: rdmactl capture of the booted guest (its
# Soft-RoCE devices on a real kernel), unpacked, is the same host to rdmad
# and doctor but for what a file cannot replay (docs/support.md, "Send us
# your host"), and holds none of the guest's identifiers.

register 1 "bookworm trixie" capture
extra_timeouts[capture]=600

# Findings a capture cannot replay (rdmactl(8), capture): what the running
# rdmad learned over time, and what it reads from netlink on the host only.
capture_unreplayable='["counter-increase", "port-flapping", "setting-contested", "setting-fought", "roce-gids", "roce-gid-missing"]'

# capture_doctor BUS ROOT: doctor's findings from the rdmad on BUS serving
# ROOT, one a line, sorted, without those a capture cannot replay, the
# times in them (each rdmad started at its own) and ROOT in its paths.
capture_doctor() {
	rdmactl --bus "$1" -o json doctor 2>/dev/null |
		jq -c --argjson drop "$capture_unreplayable" '.[] | select(.id as $id | $drop | index($id) | not)' |
		sed -E "s#${2%/}/#/#g; s/[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+(Z|[+-][0-9:]+)/TIME/g" | sort
}

# capture_once ROOT: rdmad --once's report on ROOT, its duration and its
# columns' padding left out (a path under another root is longer).
capture_once() {
	local root=$1
	rdmad --once --root "$root" --bus none 2>/dev/null |
		sed -E "s#${root%/}/#/#g; s/\([0-9.]+[µmn]?s\)/(…)/; s/ +/ /g"
}

s_capture() {
	local dir root out ids id addr bus_pid cap_pid live cap d gids took t0 rounds=0
	dir=$(mktemp -d /var/tmp/e2e-capture.XXXXXX) || fail "mktemp"
	root=$dir/host
	trap '[[ -n ${cap_pid:-} ]] && kill "$cap_pid" 2>/dev/null; [[ -n ${bus_pid:-} ]] && kill "$bus_pid" 2>/dev/null; rm -rf "$dir"; systemctl start rdmad.service' EXIT

	# The guest's identifiers, read from the kernel: its name, rxe0's
	# node GUID and GIDs, veth0's MAC and addresses.
	ids=("$(cat /proc/sys/kernel/hostname)" "$(cat /sys/class/infiniband/rxe0/node_guid)" "$(cat /sys/class/net/veth0/address)")
	# rxe's table has 1,024 entries, filled from the start: read without a
	# process each (a fork costs under the emulated CPU), to a run of 8
	# empty ones.
	gids=0
	local i empty=0
	for ((i = 0; empty < 8; i++)); do
		id=
		read -r id <"/sys/class/infiniband/rxe0/ports/1/gids/$i" 2>/dev/null || [[ -e /sys/class/infiniband/rxe0/ports/1/gids/$i ]] || break
		if [[ -z $id || $id == 0000:0000:0000:0000:0000:0000:0000:0000 ]]; then
			empty=$((empty + 1))
			continue
		fi
		empty=0
		ids+=("$id")
		gids=$((gids + 1))
	done
	while read -r addr; do ids+=("${addr%/*}"); done < <(ip -o addr show dev veth0 | awk '$3 == "inet" || $3 == "inet6" {print $4}')
	((gids > 0)) || fail "rxe0/1 has no GID: the test would prove nothing"

	took=$(now)
	out=$(cd "$dir" && rdmactl capture -o host.tar.gz 2>&1) || fail "rdmactl capture: $out"
	took=$(elapsed "$took")
	info "capture $(uname -r): $(head -n 2 <<<"$out" | tr '\n' ' ') in ${took}s"
	for id in "${ids[@]}"; do
		zcat "$dir/host.tar.gz" | tr 'A-F' 'a-f' | matches -aF "${id,,}" && fail "the capture holds $id"
	done
	tar -xzf "$dir/host.tar.gz" -C "$dir" || fail "tar -xzf the capture"
	[[ -d $root/sys/class/infiniband && -e $root/fixture/kernel.json ]] || fail "no fixture host in the capture: $(ls "$dir" | tr '\n' ' ')"

	# rdmad --once on the guest (its service stopped for it: one rdmad a
	# host) and on the capture.
	t0=$(now)
	systemctl stop rdmad.service || fail "cannot stop rdmad.service"
	live=$(capture_once /)
	systemctl start rdmad.service || fail "cannot start rdmad.service"
	cap=$(capture_once "$root")
	if ! d=$(diff <(echo "$live") <(echo "$cap")); then
		echo "rdmad --once, the guest (<) and its capture (>):"
		echo "$d"
		fail "rdmad --once differs on the capture: $(grep -c '^[<>]' <<<"$d") lines"
	fi
	info "capture rdmad --once on the guest and on the capture: $(elapsed "$t0")s, $(wc -l <<<"$live") actions"
	t0=$(now)

	# Doctor: the running rdmad's, and that of rdmad on the capture on a
	# private bus, once each answers the same twice (the health monitor
	# reads counters after the bus name).
	dbus-daemon --config-file=/usr/share/dbus-1/session.conf --address="unix:path=$dir/bus" --nofork --nopidfile &
	bus_pid=$!
	wait_for 10 test -S "$dir/bus" || fail "no private bus"
	rdmad --root "$root" --bus "unix:path=$dir/bus" 2>"$dir/rdmad.log" &
	cap_pid=$!
	wait_for 30 bash -c "rdmactl --bus unix:path=$dir/bus status >/dev/null 2>&1" || fail "rdmad on the capture never answered: $(tail -n 3 "$dir/rdmad.log" | tr '\n' ' ')"
	wait_for 20 bash -c "[[ \$(systemctl show -p ActiveState --value rdmad.service) == active ]]" || fail "rdmad.service did not come back"
	local prev_live="" prev_cap=""
	for _ in $(seq 20); do
		rounds=$((rounds + 1))
		live=$(capture_doctor system /)
		cap=$(capture_doctor "unix:path=$dir/bus" "$root")
		[[ $live == "$prev_live" && $cap == "$prev_cap" && -n $live ]] && break
		prev_live=$live prev_cap=$cap
		sleep 1
	done
	info "capture doctor on the guest and on the capture: $(elapsed "$t0")s, $rounds rounds"
	if ! d=$(diff <(echo "$live") <(echo "$cap")); then
		echo "doctor, the guest (<) and its capture (>):"
		echo "$d"
		fail "doctor differs on the capture: $(grep -c '^[<>]' <<<"$d") lines"
	fi
	pass "captured in ${took}s: $(head -n 1 <<<"$out" | cut -d: -f2-); rdmad --once and doctor ($(wc -l <<<"$live") findings) the same on the capture, none of ${#ids[@]} identifiers in it"
}
