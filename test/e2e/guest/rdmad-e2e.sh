#!/bin/bash
# rdmad end-to-end scenarios, run INSIDE the VM by rdmad-e2e.service.
#
#   rdmad-e2e.sh list SUITE BOOT  scenario names of boot BOOT (1 or 2) of the bookworm or
#                                 trixie guest; the host uses this
#   rdmad-e2e.sh run              run this boot's scenarios, report on the console, power off
#   rdmad-e2e.sh scenario NAME    run one scenario (exit 0 = pass; last line = detail)
#
# Every result goes to the serial console as one line the host parses:
#   E2E <scenario> PASS|FAIL <seconds> <detail>
# and observations worth keeping (which kernel events arrive) as
#   E2E-INFO <scenario> <text>
# Everything asserted here is read from the kernel (configfs, /sys, /proc, rdma,
# ulimit) or from systemd/journald/D-Bus, never from rdmad's own word alone.
set -uo pipefail

state_dir=/var/lib/rdmad-e2e
console=${E2E_CONSOLE:-/dev/ttyS0}
cm=/sys/kernel/config/rdma_cm
declared_tos=106          # from the guest's rdmad.toml: every rdma_rxe port
renamed_tos=72            # from the guest's rdmad.toml: only a device named rxe5
user=e2euser              # member of @rdma, created when the image is prepared
netns_dropin=/etc/rdma/rdmad.d/60-e2e-netns.toml
netns_switched='msg=applied subject=host what="netns mode" from=shared to=exclusive' # rdmad's log of a runtime switch

# Scenarios per suite: a scenario runs on every kernel that has its feature.
# Soft-iWARP exists only in the trixie guest (siw built out of tree there).
boot1_head=(boot rdmad-systemd sandbox-caps link-at-boot)
boot1_siw=(siw-link-at-boot siw-transport siw-roce-na)
boot1_tail=(tos-hotadd modules iwarp-modules roce-v1-error metrics qos-veth qos-mlx4-options memlock-user dbus-denied polkit-persist hotplug rdma-monitor kernel-events rename policy-window)
boot1_siw_late=(siw-hotplug)
boot1_netns=(netns-busy netns-runtime)
# Last of boot 1: a drop-in made bad, for the second boot (last-good-boot).
boot1_last=(last-good-break)
boot2=(reboot-boot reboot-link last-good-boot reboot-memlock reboot-doctor reboot-netns pkg-upgrade pkg-upgrade-prompt)
# ansible-core is in the bookworm image only (docs/e2e.md: its cost).
boot2_ansible=(ansible)
# Last: nothing of rdmad is left to test after the purge but a fresh install.
boot2_last=(pkg-purge pkg-install)

# Scenarios in files of their own (scenarios/*.sh beside this script, in
# the tree and in the guest) define their s_NAME functions and register
# them: `register BOOT "SUITES" NAME...` runs them after the boot's own
# scenarios, before the netns switch (boot 1) or the purge (boot 2).
declare -A extra_scenarios=() extra_timeouts=()
register() { # register BOOT "bookworm trixie" NAME...
	local boot=$1 suites=$2 s
	shift 2
	for s in $suites; do
		extra_scenarios[$s/$boot]+="$* "
	done
}
for f in "$(dirname "${BASH_SOURCE[0]}")"/scenarios/*.sh; do
	# shellcheck disable=SC1090
	[[ -e $f ]] && . "$f"
done
extra() { # extra SUITE BOOT: the registered scenarios, one a line
	local names=${extra_scenarios[$1/$2]:-}
	[[ -n $names ]] && printf '%s\n' $names
	return 0
}

# E2E_ONLY (host) or the file only_file (guest): a space-separated list of
# scenario names; when set, a boot runs only those of its scenarios, in their
# usual order (for diagnosing one scenario without the whole suite).
only_file=/usr/lib/rdmad-e2e/only
scenarios() { # scenarios SUITE BOOT
	local only=${E2E_ONLY:-}
	[[ -n $only || ! -r $only_file ]] || only=$(<"$only_file")
	if [[ -n $only ]]; then
		all_scenarios "$@" | while read -r name; do
			[[ " $only " != *" $name "* ]] || echo "$name"
		done
		return "${PIPESTATUS[0]}"
	fi
	all_scenarios "$@"
}
all_scenarios() { # all_scenarios SUITE BOOT
	case $1/$2 in
	bookworm/1) printf '%s\n' "${boot1_head[@]}" "${boot1_tail[@]}" && extra "$@" && printf '%s\n' "${boot1_netns[@]}" "${boot1_last[@]}" ;;
	trixie/1) printf '%s\n' "${boot1_head[@]}" "${boot1_siw[@]}" "${boot1_tail[@]}" "${boot1_siw_late[@]}" && extra "$@" && printf '%s\n' "${boot1_netns[@]}" "${boot1_last[@]}" ;;
	bookworm/2) printf '%s\n' "${boot2[@]}" "${boot2_ansible[@]}" && extra "$@" && printf '%s\n' "${boot2_last[@]}" ;;
	trixie/2) printf '%s\n' "${boot2[@]}" && extra "$@" && printf '%s\n' "${boot2_last[@]}" ;;
	*) return 2 ;;
	esac
}

# Seconds a scenario may run before the driver kills it: the playbook runs
# twice, and Python under the emulated CPU is slow.
scenario_timeout() {
	case $1 in
	ansible) echo 480 ;;
	policy-window) echo 300 ;;
	*) echo "${extra_timeouts[$1]:-120}" ;;
	esac
}

guest_suite() { (. /etc/os-release && echo "$VERSION_CODENAME"); }

fail() { echo "$*"; exit 1; }
pass() { echo "$*"; exit 0; }

# now: seconds since boot with millisecond resolution, for timings.
now() { local up; read -r up _ </proc/uptime; echo "$up"; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

# wait_for SECONDS CMD...: poll CMD every 50 ms until it succeeds or time runs out.
wait_for() {
	local limit=$1; shift
	local deadline
	deadline=$(awk -v a="$(now)" -v l="$limit" 'BEGIN { print a + l }')
	while true; do
		"$@" && return 0
		awk -v a="$(now)" -v d="$deadline" 'BEGIN { exit !(a >= d) }' && return 1
		sleep 0.05
	done
}

tos_of() { cat "$cm/$1/ports/${2:-1}/default_roce_tos" 2>/dev/null; }
mode_of() { cat "$cm/$1/ports/${2:-1}/default_roce_mode" 2>/dev/null; }
tos_is() { [[ "$(tos_of "$1" "${3:-1}")" == "$2" ]]; }
rdma_dev_exists() { [[ -e /sys/class/infiniband/$1 ]]; }
ensure_veth() { # ensure_veth A B: a veth pair A<->B exists and is up
	ip link show "$1" >/dev/null 2>&1 || ip link add "$1" type veth peer name "$2" || return 1
	ip link set "$1" up && ip link set "$2" up
}
rdmad_journal() { journalctl -b -u rdmad.service --no-pager -o short-monotonic 2>/dev/null; }
not() { ! "$@"; }
# matches GREP-ARGS: grep for a pipeline's end. Not grep -q: it exits at the
# first match, the writer then dies of SIGPIPE, and pipefail fails the test.
matches() { grep "$@" >/dev/null; }

# ---------------------------------------------------------------- scenarios

s_boot() {
	local st
	st=$(systemctl is-system-running 2>/dev/null)
	pass "kernel $(uname -r), boot $(cat "$state_dir/boots"), system $st"
}
s_reboot-boot() { s_boot; }

s_rdmad-systemd() {
	local en st pid ppid owner
	# Installed by dpkg from the package (run.sh), enabled by its postinst.
	load_packages
	[[ $(pkg_status) == "install ok installed $pkg_install_version" ]] || fail "dpkg status of rdmad: '$(pkg_status)', want $pkg_install_version"
	[[ $(dpkg -S /usr/sbin/rdmad 2>&1) == "rdmad: /usr/sbin/rdmad" ]] || fail "dpkg -S /usr/sbin/rdmad: $(dpkg -S /usr/sbin/rdmad 2>&1)"
	en=$(systemctl is-enabled rdmad.service 2>&1)
	[[ $en == enabled ]] || fail "rdmad.service is-enabled: $en"
	wait_for 20 bash -c '[[ $(systemctl show -p ActiveState --value rdmad.service) == active ]]'
	st=$(systemctl show -p ActiveState --value rdmad.service)
	[[ $st == active ]] || fail "rdmad.service is $st (Type=notify: active only after READY=1)"
	pid=$(systemctl show -p MainPID --value rdmad.service)
	((pid > 0)) || fail "rdmad.service has no main PID"
	ppid=$(ps -o ppid= -p "$pid" | tr -d ' ')
	[[ $ppid == 1 ]] || fail "rdmad (pid $pid) has parent $ppid, not systemd"
	owner=$(busctl --system status org.rdmad1 2>/dev/null | sed -n 's/^PID=//p')
	[[ $owner == "$pid" ]] || fail "org.rdmad1 owned by pid '${owner:-none}', rdmad is $pid"
	pass "package $pkg_install_version, active, pid $pid owns org.rdmad1, restarts $(systemctl show -p NRestarts --value rdmad.service), status: $(systemctl show -p StatusText --value rdmad.service)"
}

# The declared [[link]] rxe0 on veth0: veth0 is made by systemd-networkd at boot,
# rdmad must create rxe0 on it and give its port the declared TOS.
link_declared() {
	local t0
	t0=$(now)
	wait_for 30 ip link show veth0 >/dev/null 2>&1 || fail "veth0 never appeared (systemd-networkd .netdev)"
	wait_for 30 rdma_dev_exists rxe0 || fail "declared link rxe0 not created on veth0 within 30s"
	wait_for 10 tos_is rxe0 "$declared_tos" ||
		fail "rxe0/1 default_roce_tos is '$(tos_of rxe0)', declared $declared_tos"
	boot_timeline
	pass "rxe0 on $(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0 2>/dev/null), tos $(tos_of rxe0) after $(elapsed "$t0")s of waiting; tos ${tos_after_appear:-?}s after rxe0 appeared"
}

# rdmad_started_mono: when rdmad's main process started, seconds since
# boot (monotonic, as the kernel's trace and journalctl -o
# short-monotonic count).
rdmad_started_mono() {
	awk -v us="$(systemctl show -p ExecMainStartTimestampMonotonic --value rdmad.service)" 'BEGIN { printf "%.3f", us / 1e6 }'
}
# module_loads START [END]: the kernel's module loads between START and END
# (seconds since boot; END open), from the module:module_load tracepoint
# run.sh enables on the kernel command line: "TIMEs MODULE (TASK)" lines.
module_loads() {
	awk '/module_load:/ { for (i = 1; i <= NF; i++) if ($i == "module_load:") { t = $(i-1); sub(":", "", t); print t "s", $(i+1), "(" $1 ")" } }' /sys/kernel/tracing/trace 2>/dev/null |
		awk -v start="$1" -v end="${2:-}" '$1 + 0 >= start + 0 && (end == "" || $1 + 0 <= end + 0)'
}
# boot_timeline: when in this boot (seconds since boot) rdmad started, the
# declared rxe0 appeared (udev's USEC_INITIALIZED) and its TOS was applied
# (rdmad's "applied" line), as an E2E-INFO line; when the TOS came more than
# 1 s after the device, also rdmad's journal and the kernel's module loads
# (tracepoint module:module_load, enabled on the kernel command line by
# run.sh) up to that moment. Sets tos_after_appear.
boot_timeline() {
	local start dev tos created line
	start=$(rdmad_started_mono)
	dev=$(udevadm info -q property -p /sys/class/infiniband/rxe0 2>/dev/null | sed -n 's/^USEC_INITIALIZED=//p')
	[[ -n $dev ]] && dev=$(awk -v us="$dev" 'BEGIN { printf "%.2f", us / 1e6 }')
	# [   12.345678] host rdmad[123]: ... msg=applied subject=rxe0/1 what="roce tos" ...
	tos=$(rdmad_journal | grep -m1 -E 'msg=applied subject=rxe0/1 what="roce tos"' | sed -E 's/^\[ *([0-9.]+)\].*/\1/')
	created=$(rdmad_journal | grep -m1 -E 'msg=applied subject="link rxe0"' | sed -E 's/^\[ *([0-9.]+)\].*/\1/')
	tos_after_appear=
	[[ -n $dev && -n $tos ]] && tos_after_appear=$(awk -v a="$dev" -v b="$tos" 'BEGIN { printf "%.2f", b - a }')
	# rdmad logs a pass's actions when the pass ends: "created" is when the
	# pass that created rxe0 was over, not when rxe0 appeared.
	info "boot-timeline $(uname -r): rdmad started ${start}s, udev saw rxe0 ${dev:-?}s, rdmad logged creating it ${created:-?}s and its tos ${tos:-?}s: ${tos_after_appear:-?}s after rxe0 appeared"
	[[ -n $tos_after_appear ]] && awk -v t="$tos_after_appear" 'BEGIN { exit !(t > 1.0) }' || return 0
	while read -r line; do
		info "boot-timeline module_load $line"
	done < <(module_loads "$start" "$tos")
	while read -r line; do
		info "boot-timeline journal $line"
	done < <(rdmad_journal | awk -v end="$tos" 'match($0, /^\[ *[0-9.]+\]/) && substr($0, RSTART + 1, RLENGTH - 2) + 0 > end + 0 { exit } { print }' |
		sed -E 's/^\[ *([0-9.]+)\] [^ ]+ [^ ]+\[[0-9]+\]:/\1s/' | cut -c1-220 | head -n 40)
}
s_link-at-boot() { link_declared; }
s_reboot-link() { link_declared; }

# A Soft-RoCE device created by hand after rdmad is up gets the TOS declared
# for every RoCE port within one second of appearing, with no command to
# rdmad. The clock starts when the device shows in sysfs, not when `rdma`
# starts: under the emulated CPU the command alone can take a second.
s_tos-hotadd() {
	local t0 tdev took total pid
	ensure_veth veth2 veth3 || fail "cannot create veth2/veth3"
	t0=$(now)
	rdma link add rxe1 type rxe netdev veth2 &
	pid=$!
	wait_for 10 rdma_dev_exists rxe1 || fail "rxe1 never appeared"
	tdev=$(now)
	wait_for 5 tos_is rxe1 "$declared_tos" ||
		fail "rxe1/1 default_roce_tos is '$(tos_of rxe1)' 5s after the device appeared, declared $declared_tos"
	took=$(elapsed "$tdev")
	total=$(elapsed "$t0")
	wait "$pid" || fail "rdma link add rxe1 failed"
	awk -v t="$took" 'BEGIN { exit !(t <= 1.0) }' ||
		fail "rxe1/1 tos $declared_tos applied ${took}s after rxe1 appeared, limit 1s (${total}s after rdma link add started)"
	pass "rxe1/1 tos $declared_tos applied ${took}s after rxe1 appeared (${total}s after rdma link add started)"
}

# How long after a device's arrival the declared policy is in force (the
# window rdmad exists to close): the time from the return of `rdma link add` to the moment configfs
# shows the declared TOS (the last declared value rdmad writes for an rxe
# port: the guest policy declares no mode for them), on the guest's clock.
# configfs is polled every 2 ms without forking ($EPOCHREALTIME, `read -t` on
# a fifo), so the poll costs the emulated CPU little and measures what the
# kernel holds, not what rdmad says (its journal lines are stamped when
# journald reads them, and written when the pass ends).
#
# First the first device of a boot: rdmad is stopped, every RDMA device and
# module removed (the declared links' netdevs too, so rdmad has no device
# to create), rdmad started again (systemctl returns at READY=1), and the
# device added at once: nothing RDMA is loaded but what rdmad starts
# loading in the background. Then the same device deleted and added 20
# times. Reported as an E2E-INFO line (run.sh report prints the table);
# the targets (0.6 s first, p95 0.3 s hot-adds) are reported, not asserted:
# the emulated CPU is shared and timing is a measurement. The scenario
# fails only when a device never gets its TOS (10 s).
tick_fifo=/run/rdmad-e2e.tick
# policy_window T0 FILE VALUE: sets window to the seconds (3 decimals) from
# T0 (an $EPOCHREALTIME) until FILE reads VALUE; 1 after 10 s without. No
# subshell: a fork would delay the first look.
policy_window() {
	local t0=${1/./} f=$2 want=$3 v tick t1 d
	[[ -p $tick_fifo ]] || mkfifo "$tick_fifo" || return 1
	exec {tick}<>"$tick_fifo"
	while :; do
		v=
		{ read -r v <"$f"; } 2>/dev/null
		t1=${EPOCHREALTIME/./}
		[[ $v == "$want" ]] && break
		if ((t1 - t0 > 10000000)); then
			exec {tick}>&-
			return 1
		fi
		read -r -t 0.002 -u "$tick" _
	done
	exec {tick}>&-
	d=$((t1 - t0))
	printf -v window '%d.%03d' $((d / 1000000)) $((d / 1000 % 1000))
}
unload_tree() { # unload_tree MODULE: MODULE and every module holding it; modprobe's complaints on stdout
	local h
	[[ -d /sys/module/$1 ]] || return 0
	for h in /sys/module/"$1"/holders/*; do
		[[ -e $h ]] && unload_tree "${h##*/}"
	done
	modprobe -r "$1" 2>&1 || rmmod "$1" 2>&1
}
# policy_window_restore: the guest as policy-window found it: rdmad
# running, the declared links' netdevs back, and rdmad's links on them
# again (rxe0 with its TOS, siw0 on trixie) before it returns, on every
# exit path: the later scenarios must not start while rxe0 is missing, or
# one failure here would show as several there. It says what is not back
# (stderr) and fails; the caller decides whether that fails the scenario.
policy_window_restore() {
	local ok=0
	rdma link delete rxe4 2>/dev/null
	ip link del veth4 2>/dev/null
	systemctl start rdmad.service
	ensure_veth veth0 veth1
	[[ $(guest_suite) == trixie ]] && ensure_veth veth8 veth9
	if ! wait_for 30 tos_is rxe0 "$declared_tos"; then
		echo "policy-window: rxe0 not back with tos $declared_tos (it is '$(tos_of rxe0)')" >&2
		ok=1
	fi
	if [[ $(guest_suite) == trixie ]] && ! wait_for 30 rdma_dev_exists siw0; then
		echo "policy-window: siw0 not back" >&2
		ok=1
	fi
	return $ok
}
# policy_window_timeline PID READY ADDED TOS: where the first device's
# time went, as E2E-INFO lines on the monotonic clock (seconds since boot):
# rdmad (PID) started, READY (systemctl start returned), rdma link add
# returned, the TOS seen; the kernel's module loads since rdmad started
# (tracepoint module:module_load) and the new rdmad's journal.
policy_window_timeline() {
	local pid=$1 ready=$2 added=$3 tos=$4 start line
	start=$(rdmad_started_mono)
	info "policy-window-first rdmad started ${start}s, READY by ${ready}s, rdma link add returned ${added}s, TOS seen ${tos}s"
	while read -r line; do
		info "policy-window-first module_load $line"
	done < <(module_loads "$start")
	while read -r line; do
		info "policy-window-first journal $line"
	done < <(journalctl -b _PID="$pid" --no-pager -o short-monotonic 2>/dev/null |
		sed -E 's/^\[ *([0-9.]+)\] [^ ]+ [^ ]+\[[0-9]+\]:/\1s/' | cut -c1-220 | head -n 20)
}
preload_logged() { journalctl -b _PID="$1" --no-pager 2>/dev/null | matches 'loaded ahead of the devices'; }
percentile() { # percentile P VALUE...: the nearest-rank P-th percentile
	local p=$1; shift
	printf '%s\n' "$@" | sort -g | awk -v p="$p" '{ v[NR] = $1 } END { r = int((p * NR + 99) / 100); if (r < 1) r = 1; print v[r] }'
}
s_policy-window() {
	local dev=rxe4 nd=veth4 f d first cm_ready t0 i samples=() p50 p95 max verdict1 verdict2 out pid preload up_ready up_added up_tos window
	f=$cm/$dev/ports/1/default_roce_tos
	# A failure, or the driver's timeout (SIGTERM), must not leave the later
	# scenarios without rdmad or rxe0.
	trap policy_window_restore EXIT
	trap 'exit 143' TERM
	systemctl stop rdmad.service || fail "systemctl stop rdmad failed"
	for d in /sys/class/infiniband/*; do
		[[ -e $d ]] && rdma link delete "${d##*/}" 2>/dev/null
	done
	ip link del veth0 2>/dev/null
	ip link del veth8 2>/dev/null
	# Each rdma_cm/<dev> directory made in configfs pins rdma_cm (configfs
	# takes a reference on the subsystem's module at mkdir, and the kernel
	# does not remove the directory with the device): rmdir them all.
	for d in "$cm"/*/; do
		[[ -d $d ]] && rmdir "$d"
	done
	out=$(unload_tree ib_core)
	[[ -d /sys/module/ib_core ]] && fail "ib_core still loaded (held by: $(ls /sys/module/ib_core/holders 2>/dev/null | tr '\n' ' '); rdma_cm refcnt $(cat /sys/module/rdma_cm/refcnt 2>/dev/null), holders $(ls /sys/module/rdma_cm/holders 2>/dev/null | tr '\n' ' '), configfs: $(ls "$cm" 2>/dev/null | tr '\n' ' '); modprobe -r: $(tr '\n' ' ' <<<"$out"))"
	[[ -d /sys/module/rdma_cm || -d $cm ]] && fail "rdma_cm still loaded after ib_core was unloaded"
	ensure_veth "$nd" veth5 || fail "cannot create $nd"
	systemctl start rdmad.service || fail "systemctl start rdmad failed"
	read -r up_ready _ </proc/uptime
	rdma link add "$dev" type rxe netdev "$nd" || fail "rdma link add $dev failed (first of the boot)"
	t0=$EPOCHREALTIME
	read -r up_added _ </proc/uptime
	[[ -d $cm ]] && cm_ready=yes || cm_ready=no
	policy_window "$t0" "$f" "$declared_tos" || fail "first device: $dev/1 tos is '$(tos_of "$dev")' 10s after rdma link add returned, declared $declared_tos"
	first=$window
	read -r up_tos _ </proc/uptime
	# The new rdmad must have loaded rdma_cm ahead of the devices: that
	# preload is what the first device's figure is about.
	pid=$(rdmad_pid)
	wait_for 20 preload_logged "$pid" ||
		fail "the restarted rdmad (pid $pid) did not log loading rdma_cm ahead of the devices"
	preload=$(journalctl -b _PID="$pid" --no-pager 2>/dev/null | sed -n 's/.*loaded ahead of the devices.* took=\([^ ]*\).*/\1/p' | head -n1)
	policy_window_timeline "$pid" "$up_ready" "$up_added" "$up_tos"
	for ((i = 1; i <= 20; i++)); do
		rdma link delete "$dev" || fail "rdma link delete $dev failed (hot-add $i)"
		sleep 0.3 # the removal's own pass
		rdma link add "$dev" type rxe netdev "$nd" || fail "rdma link add $dev failed (hot-add $i)"
		t0=$EPOCHREALTIME
		policy_window "$t0" "$f" "$declared_tos" || fail "hot-add $i: $dev/1 tos is '$(tos_of "$dev")' 10s after rdma link add returned, declared $declared_tos"
		samples+=("$window")
	done
	p50=$(percentile 50 "${samples[@]}")
	p95=$(percentile 95 "${samples[@]}")
	max=$(percentile 100 "${samples[@]}")
	info "policy-window kernel=$(uname -r) first=$first rdma_cm_at_first=$cm_ready preload=${preload:-?} n=${#samples[@]} p50=$p50 p95=$p95 max=$max samples=$(IFS=,; echo "${samples[*]}")"
	trap - EXIT
	policy_window_restore 2>&1 || fail "the guest is not back after the measurement (rxe0 with tos $declared_tos, siw0 on trixie)"
	verdict1=$(awk -v t="$first" 'BEGIN { print (t < 0.6) ? "met" : "NOT met" }')
	verdict2=$(awk -v t="$p95" 'BEGIN { print (t < 0.3) ? "met" : "NOT met" }')
	pass "first device of the boot ${first}s (target 0.6s: $verdict1; rdma_cm loaded when it came: $cm_ready); 20 hot-adds p50 ${p50}s p95 ${p95}s max ${max}s (target p95 0.3s: $verdict2)"
}

# not_loaded NAME...: the names whose module is not loaded; NAME is "module"
# or "alias=module".
not_loaded() { local m; for m; do [[ -d /sys/module/${m#*=} ]] || printf '%s ' "$m"; done; }
all_loaded() { [[ -z $(not_loaded "$@") ]]; }

# The sandbox of the installed rdmad.service is enough for every kernel
# operation rdmad performs, and the privileges it keeps are really needed.
# systemd-run replays the unit's own [Service] sandbox lines (all but the
# process-management ones, so a directive added later is tested too); the
# replica is first shown to match the running rdmad (capabilities, seccomp,
# mounts), then each operation runs in it, each with a negative control.
sandbox_props() {
	sed -n '/^\[Service\]/,/^\[/p' /usr/lib/systemd/system/rdmad.service |
		grep -E '^[A-Za-z]+=' |
		grep -vE '^(Type|NotifyAccess|BusName|Exec[A-Za-z]*|Restart[A-Za-z]*|RuntimeDirectory[A-Za-z]*|Timeout[A-Za-z]*|Watchdog[A-Za-z]*)='
}
in_sandbox() { # in_sandbox [extra props...] -- CMD
	local props=() line
	while read -r line; do props+=(-p "$line"); done < <(sandbox_props)
	while [[ $1 != -- ]]; do props+=(-p "$1"); shift; done
	shift
	systemd-run --quiet --wait --pipe --collect "${props[@]}" "$@"
}
# sandbox_view /proc/PID: what the sandbox makes of a process: privileges,
# seccomp, and the read-only flag of the topmost mount (the last listed) of
# each path the unit protects or opens.
sandbox_view() {
	grep -E '^(CapBnd|CapEff|NoNewPrivs|Seccomp|Seccomp_filters):' "$1/status" | tr -s '\t ' ' '
	awk '$5 ~ "^(/|/sys|/sys/kernel/config|/sys/devices|/proc/sys|/etc/rdma/rdmad.d|/etc/modprobe.d|/etc/security/limits.d|/etc/systemd/system.conf.d)$" { split($6, o, ","); top[$5] = o[1] }
		END { for (m in top) print m, top[m] }' "$1/mountinfo" | sort
}
# A small module no scenario loads, to load under the filter.
probe_module() {
	local m f
	for m in tcp_bic tcp_htcp tcp_vegas; do
		f=$(modinfo -F filename "$m" 2>/dev/null) || continue
		[[ -n $f && $f != "(builtin)" && ! -d /sys/module/$m ]] && { echo "$m"; return 0; }
	done
	return 1
}
s_sandbox-caps() {
	local dev=rxeprobe out pid live replica m netns f sysval
	ensure_veth veth4 veth5 || fail "cannot create veth4/veth5"
	[[ -n $(sandbox_props) ]] || fail "no hardening lines found in the installed rdmad.service"

	# The replica is the real thing: same capabilities, seccomp filters and
	# mount flags as the running rdmad.
	pid=$(systemctl show -p MainPID --value rdmad.service)
	((pid > 0)) || fail "rdmad.service has no main PID"
	live=$(sandbox_view "/proc/$pid")
	replica=$(in_sandbox -- sh -c "$(declare -f sandbox_view); sandbox_view /proc/self" 2>&1) ||
		fail "systemd-run with the unit's sandbox failed: $replica"
	[[ $live == "$replica" ]] ||
		fail "systemd-run replica differs from the running rdmad: live [$(tr '\n' ';' <<<"$live")] replica [$(tr '\n' ';' <<<"$replica")]"
	grep -qx 'Seccomp: 2' <<<"$live" || fail "rdmad runs without a seccomp filter: $(tr '\n' ';' <<<"$live")"
	grep -qx '/sys/kernel/config rw' <<<"$live" || fail "configfs is not writable for rdmad: $(tr '\n' ';' <<<"$live")"
	grep -qx '/proc/sys ro' <<<"$live" || fail "/proc/sys is writable for rdmad: $(tr '\n' ';' <<<"$live")"

	# RDMA netlink: link add (and its negative control below).
	out=$(in_sandbox -- rdma link add "$dev" type rxe netdev veth4 2>&1) ||
		fail "rdma link add inside rdmad's sandbox failed: $out"
	wait_for 5 rdma_dev_exists "$dev" || fail "$dev not created"
	# configfs rdma_cm: mkdir + attribute write.
	modprobe rdma_cm 2>/dev/null # configfs rdma_cm exists once rdma_cm is loaded
	wait_for 3 tos_is "$dev" "$declared_tos" # let rdmad finish with the new device first
	# Under [drift] action = "correct" the running rdmad would put the
	# probe's write back before the probe reads it: report only, meanwhile.
	trap 'rm -f /etc/rdma/rdmad.d/60-e2e-sandbox-report.toml; rdmactl reload >/dev/null 2>&1' EXIT
	printf '# added by the rdmad e2e test\n[drift]\naction = "report"\n' >/etc/rdma/rdmad.d/60-e2e-sandbox-report.toml
	rdmactl reload >/dev/null 2>&1 || fail "rdmactl reload with [drift] action = \"report\" failed"
	out=$(in_sandbox -- sh -c "d=$cm/$dev; { [ -d \$d ] || mkdir \$d; } && echo 32 >\$d/ports/1/default_roce_tos && cat \$d/ports/1/default_roce_tos && rmdir \$d" 2>&1) ||
		fail "configfs rdma_cm mkdir/write inside rdmad's sandbox failed: $out"
	[[ $out == 32 ]] || fail "configfs tos read back '$out' inside the sandbox"
	rm -f /etc/rdma/rdmad.d/60-e2e-sandbox-report.toml
	rdmactl reload >/dev/null 2>&1
	rdma link del "$dev" || fail "rdma link del $dev failed"
	# RDMA netlink: netns mode, set to what it is (the permission check runs,
	# nothing changes).
	netns=$(rdma system show netns 2>/dev/null | grep -oE 'shared|exclusive' | head -1)
	[[ -n $netns ]] || fail "rdma system show netns: no mode"
	out=$(in_sandbox -- rdma system set netns "$netns" 2>&1) ||
		fail "rdma system set netns $netns inside the sandbox failed: $out"
	if out=$(in_sandbox CapabilityBoundingSet=~CAP_NET_ADMIN -- rdma system set netns "$netns" 2>&1); then
		fail "rdma system set netns succeeded without CAP_NET_ADMIN"
	fi
	# Files rdmad owns, in every writable /etc directory of the unit (one
	# systemd-run for all four: each costs seconds on a loaded TCG guest).
	out=$(in_sandbox -- sh -c 'for d in /etc/rdma/rdmad.d /etc/security/limits.d /etc/systemd/system.conf.d /etc/modprobe.d; do
		f=$d/.rdmad-e2e-probe; echo x >$f && mv $f $f.2 && rm $f.2 || { echo "in $d"; exit 1; }; done' 2>&1) ||
		fail "writing rdmad's /etc directories inside the sandbox failed: $out"
	if out=$(in_sandbox -- touch /etc/rdmad-e2e-probe 2>&1); then
		rm -f /etc/rdmad-e2e-probe
		fail "the sandbox lets rdmad write /etc outside its ReadWritePaths"
	fi
	# rdmad's own files keep mode 0644 under UMask=0077 (explicit chmod).
	f=/etc/security/limits.d/90-rdmad-memlock.conf
	[[ $(stat -c %a "$f" 2>&1) == 644 ]] || fail "$f written by rdmad has mode $(stat -c %a "$f" 2>&1), want 644"
	# sysfs device attributes stay writable (mlx4_port<N> lives under
	# /sys/devices); /proc/sys does not (ProtectKernelTunables).
	out=$(in_sandbox -- sh -c 'echo rdmad-e2e >/sys/class/net/veth4/ifalias' 2>&1) ||
		fail "writing a /sys/devices attribute inside the sandbox failed: $out"
	[[ $(cat /sys/class/net/veth4/ifalias) == rdmad-e2e ]] || fail "ifalias write inside the sandbox did not land"
	sysval=$(cat /proc/sys/net/core/somaxconn)
	if in_sandbox -- sh -c "echo $sysval >/proc/sys/net/core/somaxconn" >/dev/null 2>&1; then
		fail "the sandbox lets rdmad write /proc/sys"
	fi
	# modprobe under the system call filter: refused when the module calls
	# are filtered out (the filter is live), loaded with the unit's filter.
	m=$(probe_module) || fail "no unloaded probe module (tcp_bic tcp_htcp tcp_vegas) in this kernel"
	if out=$(in_sandbox "SystemCallFilter=~finit_module init_module" -- modprobe "$m" 2>&1) || [[ -d /sys/module/$m ]]; then
		rmmod "$m" 2>/dev/null
		fail "modprobe $m succeeded with finit_module/init_module filtered out: the filter is not applied"
	fi
	out=$(in_sandbox -- modprobe "$m" 2>&1) || fail "modprobe $m inside rdmad's sandbox failed: $out"
	[[ -d /sys/module/$m ]] || fail "modprobe $m in the sandbox exited 0 but $m is not loaded"
	rmmod "$m" 2>/dev/null
	# ethtool: global pause over ethtool netlink and the PFC storm timeout
	# ioctl (SIOCETHTOOL on an AF_NETLINK socket), with rdmad's own code:
	# both reach the veth's driver, which has neither (EOPNOTSUPP, not
	# EPERM or EAFNOSUPPORT). Without AF_NETLINK both are refused at the
	# socket; with ioctl filtered out, the tunable is refused by seccomp.
	out=$(in_sandbox -- /usr/lib/rdmad-e2e/ethtool-probe veth4 2>&1) || fail "ethtool-probe in the sandbox: $out"
	[[ $(grep -c 'operation not supported' <<<"$out") == 2 ]] ||
		fail "pause and the PFC storm timeout inside rdmad's sandbox did not reach the veth's driver (want EOPNOTSUPP twice): $out"
	out=$(in_sandbox RestrictAddressFamilies= RestrictAddressFamilies=AF_UNIX -- /usr/lib/rdmad-e2e/ethtool-probe veth4 2>&1)
	[[ $(grep -c 'address family not supported' <<<"$out") == 2 ]] ||
		fail "the sandbox without AF_NETLINK let the ethtool calls through: $out"
	out=$(in_sandbox "SystemCallFilter=~ioctl" -- /usr/lib/rdmad-e2e/ethtool-probe veth4 2>&1)
	matches 'tunable: .*operation not permitted' <<<"$out" || fail "the tunable ioctl passed with ioctl filtered out: $out"
	# The negative control: without CAP_NET_ADMIN the same link add is refused.
	if out=$(in_sandbox CapabilityBoundingSet=~CAP_NET_ADMIN -- rdma link add "$dev" type rxe netdev veth4 2>&1); then
		rdma link del "$dev" 2>/dev/null
		fail "rdma link add succeeded without CAP_NET_ADMIN: the capability set is not minimal evidence"
	fi
	# ExecReload (kill -HUP) runs in the real unit's sandbox: it must reach
	# rdmad, which handles SIGHUP and keeps running.
	out=$(systemctl reload rdmad.service 2>&1) || fail "systemctl reload rdmad.service failed: $out"
	[[ $(systemctl show -p MainPID --value rdmad.service) == "$pid" ]] ||
		fail "rdmad pid changed from $pid after systemctl reload"
	pass "replica = live rdmad ($(grep -E '^Seccomp_filters' <<<"$live")); link add, configfs, netns set, /etc + /sys/devices writes, modprobe $m, ethtool pause + SIOCETHTOOL, reload OK; refused: /etc, /proc/sys, modprobe w/o module calls, ethtool w/o AF_NETLINK or ioctl, link add w/o CAP_NET_ADMIN"
}

# rdmad, not Debian's rdma-load-modules@ units (masked in this image), loaded
# the modules listed in /etc/rdma/modules/rdma.conf (any device) and roce.conf
# (a RoCE device: rxe is one).
s_modules() {
	local unit f m loaded=() missing=() absent=()
	for unit in rdma-load-modules@rdma.service rdma-load-modules@roce.service; do
		[[ $(systemctl is-enabled "$unit" 2>&1) == masked ]] || fail "$unit is not masked: the test would prove nothing"
	done
	rdma_dev_exists rxe0 || rdma_dev_exists rxe1 || fail "no RoCE device present to trigger module loading"
	for f in /etc/rdma/modules/rdma.conf /etc/rdma/modules/roce.conf; do
		[[ -r $f ]] || fail "$f missing"
		while read -r m _; do
			[[ -z $m || $m == \#* ]] && continue
			local file
			if ! file=$(modinfo -F filename "$m" 2>/dev/null) || [[ -z $file ]]; then
				absent+=("$m") # not built for this kernel: nobody can load it
				continue
			fi
			# Names in the lists may be aliases (xprtrdma, svcrdma are rpcrdma):
			# /sys/module knows the real module name.
			if [[ $file == "(builtin)" ]]; then
				loaded+=("$m")
				continue
			fi
			local real=${file##*/}
			real=${real%%.ko*}
			real=${real//-/_}
			[[ $real == "${m//-/_}" ]] || m="$m=$real"
			if [[ -d /sys/module/$real ]]; then
				loaded+=("$m")
			else
				missing+=("$m")
			fi
		done <"$f"
	done
	# Loading happens on device arrival; give a slow (TCG) guest a moment.
	if ((${#missing[@]})); then
		wait_for 10 all_loaded "${missing[@]}" ||
			fail "not loaded: $(not_loaded "${missing[@]}") (loaded: ${loaded[*]:-none})"
		loaded+=("${missing[@]}")
	fi
	((${#loaded[@]})) || fail "no module of rdma.conf/roce.conf exists in this kernel"
	pass "loaded: ${loaded[*]}${absent:+; not in kernel: ${absent[*]}}"
}

# `v1` declared for an rxe port (rxe supports only RoCE v2, the kernel answers
# EIO): rdmad must report a per-port error and still apply everything else.
s_roce-v1-error() {
	local status json
	ensure_veth veth2 veth3 || fail "cannot create veth2/veth3"
	rdma link add rxe9 type rxe netdev veth3 || fail "rdma link add rxe9 failed"
	wait_for 5 tos_is rxe9 "$declared_tos" ||
		fail "rxe9/1 tos is '$(tos_of rxe9)': the failing mode must not stop the TOS ($declared_tos)"
	[[ $(mode_of rxe9) == "RoCE v2" ]] || fail "rxe9/1 mode is '$(mode_of rxe9)', expected the kernel to keep RoCE v2"
	tos_is rxe0 "$declared_tos" || fail "rxe0/1 tos is '$(tos_of rxe0)' after the rxe9 failure"
	# Text: `rdmactl status` lists failed ports as "  DEV/PORT: error".
	wait_for 5 bash -c 'rdmactl status 2>/dev/null | grep -qE "^ +rxe9/1: "' ||
		fail "rdmactl status shows no error for rxe9/1: $(rdmactl status 2>&1 | tail -n 5 | tr '\n' ' ')"
	status=$(rdmactl status 2>&1 | grep -E '^ +rxe9/1: ' | head -1)
	grep -qiE 'v1|mode' <<<"$status" || fail "rxe9/1 error does not say what failed: $status"
	if rdmactl status 2>&1 | matches -E '^ +rxe0/1: '; then
		fail "rdmactl status shows an error for rxe0/1 too: $(rdmactl status 2>&1 | grep -E '^ +rxe0/1: ')"
	fi
	json=$(rdmactl -o json status 2>&1) || fail "rdmactl -o json status failed: $json"
	# The actions of the last passes carry typed subjects: a failed roce
	# mode on port rxe9/1, nothing failed on rxe0.
	local failed='[.actions[] | select(.status == "failed" and .subject.kind == "port") | "\(.subject.device)/\(.subject.port) \(.kind)"]'
	jq -e "$failed | any(. == \"rxe9/1 roce mode\") and (any(startswith(\"rxe0/\")) | not)" >/dev/null <<<"$json" ||
		fail "failed port actions in rdmactl -o json status: $(jq -c "$failed" <<<"$json" 2>&1 | cut -c1-200)"
	jq -e '[.devices[] | select(.name == "rxe9") | .ports[] | select(.port == 1) | .error | select(length > 0)] | length == 1' >/dev/null <<<"$json" ||
		fail "rxe9 port 1 has no error in rdmactl -o json status"
	rdmad_journal | grep -F rxe9 | matches -iE 'v1|mode' ||
		fail "journal of rdmad.service does not mention the rxe9 mode failure"
	pass "rxe9 tos $(tos_of rxe9), mode '$(mode_of rxe9)'; status: $(echo "$status" | tr -s ' ' | cut -c1-120)"
}

memlock_check() {
	local soft hard
	id -nG "$user" | tr ' ' '\n' | matches -x rdma || fail "$user is not in group rdma"
	soft=$(runuser -l "$user" -c 'ulimit -Sl' 2>&1)
	hard=$(runuser -l "$user" -c 'ulimit -Hl' 2>&1)
	[[ $soft == unlimited && $hard == unlimited ]] ||
		fail "runuser -l $user: ulimit -l soft '$soft' hard '$hard', declared unlimited (files: $(ls /etc/security/limits.d 2>&1 | tr '\n' ' '))"
	echo "ulimit -l for $user: soft $soft, hard $hard"
}
s_memlock-user() { memlock_check; }

# After a reboot PID 1 has read the DefaultLimitMEMLOCK drop-in rdmad rendered.
s_reboot-memlock() {
	local user_line svc
	user_line=$(memlock_check) || fail "$user_line"
	svc=$(systemctl show -p DefaultLimitMEMLOCK --value)
	[[ $svc == infinity ]] || fail "systemd DefaultLimitMEMLOCK is '$svc', declared unlimited (drop-ins: $(ls /etc/systemd/system.conf.d 2>&1 | tr '\n' ' '))"
	pass "$user_line; DefaultLimitMEMLOCK=$svc"
}

# rdmactl doctor on the real kernel: its findings must match what the guest
# shows by other means (sysfs, lsmod, /etc, ulimit, systemd, rdma), and its
# exit status must say whether a finding fails. Runs after the reboot, when
# the memlock limits rdmad rendered are in force for logins and services.
s_reboot-doctor() {
	local json rc fails want_rc f dev port state mode
	json=$(runuser -u "$user" -- rdmactl -o json doctor 2>/dev/null)
	rc=$?
	jq -e 'type == "array" and length > 0' >/dev/null <<<"$json" || fail "rdmactl -o json doctor (as $user) gave no findings (exit $rc): $(head -c 200 <<<"$json")"
	has() { # has ID SUBJECT [SEVERITY]: SUBJECT as rdmactl prints it (host, rxe0, rxe0/1, ib0)
		jq -e --arg id "$1" --arg s "$2" --arg sev "${3:-}" '
			def subj: .subject | if .kind == "port" then .device + "/" + (.port | tostring)
				elif .kind == "device" then .device elif .kind == "netdev" then .netdev else .kind end;
			any(.[]; .id == $id and subj == $s and ($sev == "" or .severity == $sev))' >/dev/null <<<"$json"
	}
	fails=$(jq '[.[] | select(.severity == "fail")] | length' <<<"$json")
	want_rc=0; ((fails > 0)) && want_rc=1
	((rc == want_rc)) || fail "rdmactl doctor exit $rc with $fails failing findings"
	# The readiness probe's form: nothing printed, the same exit status.
	local quiet qrc
	quiet=$(runuser -u "$user" -- rdmactl doctor --quiet 2>&1)
	qrc=$?
	[[ -z $quiet && $qrc == "$rc" ]] || fail "rdmactl doctor --quiet: exit $qrc (doctor: $rc), printed '$(head -c 200 <<<"$quiet")'"
	# Ports: ACTIVE in sysfs <=> port-active; the Soft-RoCE port has no other finding.
	for f in /sys/class/infiniband/*/ports/*; do
		dev=${f#/sys/class/infiniband/}; dev=${dev%%/*}; port=${f##*/}
		state=$(cut -d' ' -f2 <"$f/state")
		if [[ $state == ACTIVE ]]; then
			has port-active "$dev/$port" ok || fail "$dev/$port is ACTIVE in sysfs, doctor says otherwise"
		else
			has port-active "$dev/$port" && fail "$dev/$port is $state in sysfs, doctor says port-active"
		fi
	done
	jq -e 'all(.[]; ((.subject.device == "rxe0") | not) or .severity == "ok")' >/dev/null <<<"$json" ||
		fail "a healthy rxe0 got a warning: $(jq -c '[.[] | select(.subject.device == "rxe0" and .severity != "ok")]' <<<"$json" | cut -c1-200)"
	# User space: lsmod and /etc/libibverbs.d against the verbs findings.
	if lsmod | grep -q '^ib_uverbs ' && lsmod | grep -q '^rdma_ucm '; then
		has verbs-modules-missing host && fail "ib_uverbs and rdma_ucm are loaded, doctor says missing"
	else
		has verbs-modules-missing host fail || fail "ib_uverbs/rdma_ucm not both loaded, doctor does not say so"
	fi
	if compgen -G '/etc/libibverbs.d/*.driver' >/dev/null; then
		has verbs-providers host ok || fail "/etc/libibverbs.d has providers, doctor says otherwise"
	else
		has verbs-providers-missing host fail || fail "/etc/libibverbs.d has no providers, doctor does not say so"
	fi
	# Memlock: what a member of @rdma and systemd really have.
	[[ $(runuser -l "$user" -c 'ulimit -Sl') == unlimited ]] && { has memlock-login host ok || fail "login memlock is unlimited, doctor says otherwise"; }
	[[ $(systemctl show -p DefaultLimitMEMLOCK --value) == infinity ]] && { has memlock-services host ok || fail "DefaultLimitMEMLOCK is infinity, doctor says otherwise"; }
	# No NFS server here: NFS over RDMA is off.
	has nfs-rdma-off host ok || fail "no NFS server in the guest, doctor says: $(jq -c '[.[] | select(.id | startswith("nfs"))]' <<<"$json")"
	# The running netns mode as rdma(8) shows it.
	mode=$(rdma system show 2>/dev/null | grep -oE 'netns (shared|exclusive)' | cut -d' ' -f2)
	[[ -n $mode ]] && { jq -e --arg m "$mode" 'any(.[]; .id == "netns-mode" and (.finding | contains("mode " + $m)))' >/dev/null <<<"$json" ||
		fail "rdma system show says netns $mode, doctor: $(jq -r '.[] | select(.id | startswith("netns")) | .finding' <<<"$json")"; }
	pass "$(jq -r 'group_by(.severity) | map("\(length) \(.[0].severity)") | join(", ")' <<<"$json"), exit $rc; not ok: $(jq -r '[.[] | select(.severity != "ok") | .id] | join(" ")' <<<"$json")"
}

# A drop-in made bad between two boots: the last good policy must apply at
# the next start (docs/decisions/last-good.md). It also declares a
# TOS for every Soft-RoCE port, so a policy applied in part would show.
bad_dropin=/etc/rdma/rdmad.d/70-e2e-bad.toml
bad_tos=40
last_good=/var/lib/rdmad/last-good-config.json
config_error() { describe | jq -r '.config_error'; }
s_last-good-break() {
	local pid err
	pid=$(rdmad_pid)
	[[ -s $last_good ]] || fail "$last_good missing: rdmad saved no last good configuration"
	printf '# made bad by the e2e test between the boots
[[roce]]
driver = "rdma_rxe"
tos = %d
mode = "v3"
' "$bad_tos" >"$bad_dropin"
	has_error() { [[ $(config_error) == *"$bad_dropin:5"* ]]; }
	wait_for 10 has_error || fail "rdmad did not report $bad_dropin:5 after the edit: '$(config_error)'"
	[[ $(rdmad_pid) == "$pid" ]] || fail "rdmad restarted on a bad edit (pid $pid -> $(rdmad_pid))"
	tos_is rxe0 "$declared_tos" || fail "rxe0/1 tos '$(tos_of rxe0)' after a bad edit, the last good is $declared_tos"
	err=$(config_error)
	pass "bad drop-in in place for the next boot; running rdmad keeps tos $declared_tos and reports: ${err:0:120}"
}

# The second boot with that drop-in: rdmad runs (no restart loop), applied
# the last good configuration (rxe0 recreated with TOS 106, not the bad
# file's 40), and the error with file:line is in the journal at error
# priority, rdmactl status, a failing rdmactl doctor and STATUS=; a persisted
# call is refused, a runtime one works; removing the file clears it all.
s_last-good-boot() {
	local where=$bad_dropin:5 errs doc rc out restarts
	[[ -e $bad_dropin ]] || fail "$bad_dropin is gone: boot 1's last-good-break did not run"
	wait_for 30 rdma_dev_exists rxe0 || fail "rxe0 (declared in the last good configuration) not created"
	wait_for 10 tos_is rxe0 "$declared_tos" || fail "rxe0/1 tos '$(tos_of rxe0)', want the last good $declared_tos (the bad file says $bad_tos)"
	restarts=$(unit_prop NRestarts)
	[[ $(unit_prop ActiveState) == active && $restarts == 0 ]] || fail "rdmad.service $(unit_prop ActiveState), $restarts restarts"
	errs=$(journalctl -b -u rdmad.service -p err --no-pager -o cat 2>&1)
	matches -F "$where" <<<"$errs" || fail "journalctl -u rdmad -p err has no line naming $where: $(head -c 300 <<<"$errs")"
	[[ $(config_error) == *"$where"* ]] || fail "rdmactl status config_error '$(config_error)', want $where"
	[[ $(unit_prop StatusText) == *"$where"* ]] || fail "systemctl status text '$(unit_prop StatusText)' does not name $where"
	doc=$(rdmactl -o json doctor 2>/dev/null)
	rc=$?
	((rc == 1)) || fail "rdmactl doctor exit $rc with a configuration that does not load"
	jq -e --arg w "$where" 'any(.[]; .severity == "fail" and (.finding | contains($w)) and (.fix | length > 0))' >/dev/null <<<"$doc" ||
		fail "rdmactl doctor has no fail with a fix naming $where: $(jq -c '[.[] | select(.severity == "fail")]' <<<"$doc" | cut -c1-300)"
	out=$(rdmactl roce set rxe0/1 --tos 50 --persist 2>&1) && fail "a persisted call was accepted while the files do not load: $out"
	[[ $out == *persist* ]] || fail "a refused persisted call does not say why: $out"
	out=$(rdmactl roce set rxe0/1 --tos 50 2>&1) || fail "a runtime call failed while the files do not load: $out"
	tos_is rxe0 50 || fail "runtime tos 50 not applied: $(tos_of rxe0)"
	rm -f "$bad_dropin"
	cleared() { [[ -z $(config_error) ]]; }
	wait_for 10 cleared || fail "the error stayed after $bad_dropin was removed: $(config_error)"
	# The runtime 50 lasts until rdmad restarts: restart it, so the later
	# scenarios see the files' policy alone.
	systemctl restart rdmad.service || fail "systemctl restart rdmad"
	wait_for 30 tos_is rxe0 "$declared_tos" || fail "rxe0/1 tos '$(tos_of rxe0)' after the restart, want $declared_tos"
	pass "last good tos $declared_tos applied at boot, 0 restarts; journal -p err, status, STATUS= and doctor name $where; persist refused; cleared when fixed"
}

# Reading is open to all, changing needs authorization: a plain member of
# @rdma cannot change RoCE settings over D-Bus; root can (the control that
# shows the denial is about the caller, not a broken method).
s_dbus-denied() {
	local before out rc denied
	before=$(mode_of rxe0)
	[[ -n $before ]] || fail "rxe0 has no configfs mode to protect"
	runuser -u "$user" -- rdmactl status >/dev/null 2>&1 || fail "$user cannot even read status"
	out=$(runuser -u "$user" -- rdmactl roce set rxe0/1 --mode v2 2>&1)
	rc=$?
	((rc != 0)) || fail "rdmactl roce set as $user succeeded: $out"
	grep -qiE 'denied|not authori[sz]ed|permission' <<<"$out" || fail "exit $rc but no access-denied message: $out"
	[[ $(mode_of rxe0) == "$before" ]] || fail "mode of rxe0/1 changed to '$(mode_of rxe0)' by a denied call"
	denied=$(head -n1 <<<"$out" | cut -c1-120)
	out=$(rdmactl roce set rxe0/1 --mode v2 2>&1) || fail "root's rdmactl roce set rxe0/1 --mode v2 failed: $out"
	pass "$user: exit $rc, $denied; root: ok"
}

# A persisted change needs org.rdmad1.set-persistent besides the method's
# own action, asked of the real polkit: a user a site rule allows
# org.rdmad1.set-roce changes rxe0's TOS at runtime but not with --persist;
# with rdmad's shipped optional rule linked into rules.d, set-persistent
# follows the method's action and the same call persists. Root withdraws it
# (rdmactl roce unset --persist) and the files decide again.
s_polkit-persist() {
	local site=/etc/polkit-1/rules.d/40-e2e-rdma.rules link=/etc/polkit-1/rules.d/50-rdmad-persist-as-runtime.rules
	local shipped=/usr/share/rdmad/polkit/50-rdmad-persist-as-runtime.rules dropin=/etc/rdma/rdmad.d/zz-rdmad-persist.toml
	local out rc refused
	[[ -f $shipped ]] || fail "$shipped is not installed"
	cat >"$site" <<RULES
polkit.addRule(function(action, subject) {
    if (action.id == "org.rdmad1.set-roce" && subject.user == "$user") {
        return polkit.Result.YES;
    }
});
RULES
	# EXIT, not RETURN: pass and fail exit the scenario's process, and a
	# rule left behind would let this user change RoCE in later scenarios.
	trap 'rm -f "$site" "$link"' EXIT
	as_user() { runuser -u "$user" -- rdmactl --no-ask-password roce set rxe0/1 "$@"; }
	# polkitd reads rules.d again when it changes.
	wait_for 15 as_user --tos 40 >/dev/null 2>&1 || fail "$user is not allowed org.rdmad1.set-roce by the site rule: $(as_user --tos 40 2>&1)"
	tos_is rxe0 40 || fail "runtime TOS 40 not in configfs: '$(tos_of rxe0)'"
	out=$(as_user --tos 41 --persist 2>&1)
	rc=$?
	((rc != 0)) || fail "persisted without org.rdmad1.set-persistent: $out"
	grep -q 'org.rdmad1.set-persistent' <<<"$out" || fail "exit $rc, but the refusal does not name org.rdmad1.set-persistent: $out"
	tos_is rxe0 40 || fail "the refused persisted call changed the TOS to '$(tos_of rxe0)'"
	! grep -qs 'tos = 41' "$dropin" || fail "the refused persisted call wrote $dropin"
	refused=$(head -n1 <<<"$out" | cut -c1-100)
	ln -s "$shipped" "$link"
	wait_for 15 as_user --tos 41 --persist >/dev/null 2>&1 || fail "with the shipped rule linked: $(as_user --tos 41 --persist 2>&1)"
	tos_is rxe0 41 || fail "persisted TOS 41 not in configfs: '$(tos_of rxe0)'"
	grep -q 'tos = 41' "$dropin" || fail "$dropin does not hold tos = 41: $(cat "$dropin" 2>&1)"
	out=$(rdmactl roce unset rxe0/1 --persist 2>&1) || fail "root's rdmactl roce unset rxe0/1 --persist: $out"
	! grep -qs 'tos = 41' "$dropin" || fail "unset --persist left tos = 41 in $dropin"
	wait_for 5 tos_is rxe0 "$declared_tos" || fail "after unset the files' TOS $declared_tos is not back: '$(tos_of rxe0)'"
	pass "runtime ok; persisted refused ($refused); with the shipped rule persisted; unset: TOS $declared_tos again"
}

# replug DEV NETDEV PEER: the netdev under the declared soft link DEV goes
# away (DEV with it) and comes back; rdmad must recreate DEV on it without
# being told. Sets replugged_after: seconds from the netdev's return.
replug() {
	local dev=$1 nd=$2 peer=$3 t0
	rdma_dev_exists "$dev" || fail "$dev missing before the test"
	ip link del "$nd" || fail "ip link del $nd failed"
	wait_for 10 not rdma_dev_exists "$dev" || fail "$dev survived the deletion of $nd"
	t0=$(now)
	ip link add "$nd" type veth peer name "$peer" || fail "ip link add $nd failed"
	ip link set "$nd" up; ip link set "$peer" up
	wait_for 10 rdma_dev_exists "$dev" || fail "$dev not recreated within 10s of $nd coming back"
	rdma link show "$dev/1" | matches "netdev $nd" || fail "$dev recreated on the wrong netdev: $(rdma link show "$dev/1")"
	replugged_after=$(elapsed "$t0")
}

# Live events: rdmad recreates rxe0 and reapplies its TOS.
s_hotplug() {
	replug rxe0 veth0 veth1
	wait_for 5 tos_is rxe0 "$declared_tos" || fail "rxe0 recreated but tos is '$(tos_of rxe0)'"
	pass "rxe0 back with tos $(tos_of rxe0) ${replugged_after}s after veth0 reappeared"
}

# ---------------------------------------------------------------- helpers 2

info() { printf 'E2E-INFO %s\n' "$*"; } # kept by the host (run.sh report)
rdmad_pid() { systemctl show -p MainPID --value rdmad.service; }
kernel_at_least() { # kernel_at_least MAJOR MINOR
	local v=${1}.${2} k
	k=$(uname -r | cut -d- -f1 | cut -d. -f1,2)
	[[ $(printf '%s\n%s\n' "$v" "$k" | sort -V | head -n1) == "$v" ]]
}
# describe: rdmad's Describe document, as `rdmactl -o json status` prints it
# (devices, and the actions of the last pass over the host and each device).
describe() { rdmactl -o json status 2>/dev/null; }
dbus_objects() { busctl --system --json=short call org.rdmad1 /org/rdmad1 org.freedesktop.DBus.ObjectManager GetManagedObjects | jq -r '.data[0] | keys[]'; }
dbus_object() { dbus_objects | matches -x "/org/rdmad1/devices/$1"; }
rdma_netns_mode() { rdma system show 2>/dev/null | grep -oE 'netns (shared|exclusive)' | cut -d' ' -f2; }
# journal_since CURSOR [FIELD=VALUE]: the messages of rdmad.service (or of
# the entries with FIELD=VALUE) after a cursor taken with journal_cursor.
# Filtered by jq, not by a journalctl match: systemd 252's journalctl
# --after-cursor with a match skips the first matching entry when the
# cursor's own entry does not match.
journal_cursor() { journalctl -n 0 --show-cursor --no-pager 2>/dev/null | sed -n 's/^-- cursor: //p'; }
journal_since() {
	local field=${2:-_SYSTEMD_UNIT=rdmad.service}
	journalctl --after-cursor="$1" --no-pager -o json 2>/dev/null |
		jq -r --arg k "${field%%=*}" --arg v "${field#*=}" 'select(.[$k] == $v) | .MESSAGE | strings'
}

# ---------------------------------------------------------------- Soft-iWARP (trixie)

# Declared in 20-e2e-siw.toml: [[link]] siw0 type siw on veth8 (made by
# systemd-networkd), and a [[roce]] rule matching it.
s_siw-link-at-boot() {
	local t0 nd
	t0=$(now)
	wait_for 30 ip link show veth8 >/dev/null 2>&1 || fail "veth8 never appeared (systemd-networkd .netdev)"
	wait_for 30 rdma_dev_exists siw0 || fail "declared link siw0 not created on veth8 within 30s ($(rdma link show 2>&1 | tr '\n' ';'))"
	[[ $(cat /sys/class/infiniband/siw0/node_type) == "4: RNIC" ]] || fail "siw0 node_type is '$(cat /sys/class/infiniband/siw0/node_type)', want 4: RNIC"
	nd=$(rdma link show siw0/1 2>&1)
	grep -q 'netdev veth8' <<<"$nd" || fail "rdma link show siw0/1: $nd"
	pass "siw0 on veth8 ($(modinfo -F filename siw)), $(elapsed "$t0")s of waiting; $(tr -s ' ' <<<"$nd" | cut -c1-80)"
}

s_siw-transport() {
	local out json
	rdma_dev_exists siw0 || fail "siw0 missing"
	wait_for 10 bash -c 'rdmactl -o json status | jq -e ".devices[] | select(.name == \"siw0\")" >/dev/null' ||
		fail "rdmactl does not show siw0"
	json=$(rdmactl -o json status) || fail "rdmactl -o json status failed"
	jq -e '.devices[] | select(.name == "siw0") | (.transports == ["iwarp"]) and ([.ports[].transport] == ["iwarp"])' >/dev/null <<<"$json" ||
		fail "siw0 transports: $(jq -c '.devices[] | select(.name == "siw0") | [.transports, [.ports[].transport]]' <<<"$json")"
	out=$(rdmactl device show siw0 2>&1) || fail "rdmactl device show siw0: $out"
	grep -qE '^ *transport +iwarp' <<<"$out" || fail "rdmactl device show siw0 does not say transport iwarp: $(tr '\n' ';' <<<"$out" | cut -c1-160)"
	pass "rdmactl: siw0 transport iwarp, port 1 transport iwarp"
}

# A [[roce]] rule that matches the iWARP device (device = "siw*") is
# not-applicable: reported, never a failure, nothing written to configfs.
s_siw-roce-na() {
	local act json
	rdma_dev_exists siw0 || fail "siw0 missing"
	siw_roce_action() {
		act=$(describe | jq -c '[.actions[] | select(.subject.kind == "port" and .subject.device == "siw0" and .subject.port == 1 and .kind == "roce tos")]')
		jq -e 'length == 1 and .[0].status == "not-applicable" and (.[0].error | test("iwarp"))' >/dev/null <<<"$act"
	}
	wait_for 10 siw_roce_action || fail "rdmactl -o json status: siw0/1 roce actions: $act"
	json=$(describe)
	jq -e '([.actions[] | select(.subject.device == "siw0" and .status == "failed")] | length == 0) and ([.devices[] | select(.name == "siw0") | .ports[].error] == [""])' >/dev/null <<<"$json" ||
		fail "siw0 reported as failed: $(jq -c '[[.actions[] | select(.subject.device == "siw0")], (.devices[] | select(.name == "siw0") | .ports)]' <<<"$json" | cut -c1-200)"
	[[ -z $(tos_of siw0) || $(tos_of siw0) != 32 ]] || fail "rdma_cm siw0 tos was set to 32"
	pass "siw0/1 roce not-applicable: $(jq -r '.[0].error' <<<"$act" | cut -c1-100)"
}

s_siw-hotplug() {
	replug siw0 veth8 veth9
	pass "siw0 back on veth8 ${replugged_after}s after veth8 reappeared"
}

# iwarp.conf (the image adds nvme_rdma to Debian's empty one) is loaded for an
# iWARP device and only then: on a kernel without siw its modules stay out.
s_iwarp-modules() {
	local mods=() m iw=()
	[[ $(systemctl is-enabled rdma-load-modules@iwarp.service 2>&1) == masked ]] || fail "rdma-load-modules@iwarp is not masked"
	while read -r m _; do [[ -z $m || $m == \#* ]] || mods+=("$m"); done </etc/rdma/modules/iwarp.conf
	((${#mods[@]})) || fail "/etc/rdma/modules/iwarp.conf lists no module"
	for m in /sys/class/infiniband/*; do
		[[ $(cat "$m/node_type" 2>/dev/null) == "4: RNIC" ]] && iw+=("${m##*/}")
	done
	if ((${#iw[@]})); then
		wait_for 20 all_loaded "${mods[@]}" || fail "iWARP device ${iw[*]} present, not loaded: $(not_loaded "${mods[@]}")"
		pass "iWARP device ${iw[*]}: iwarp.conf loaded (${mods[*]})"
	fi
	sleep 2 # whatever rdmad would load for the devices present is loading by now
	[[ $(not_loaded "${mods[@]}") == "$(printf '%s ' "${mods[@]}")" ]] ||
		fail "no iWARP device, but iwarp.conf modules are loaded: $(for m in "${mods[@]}"; do [[ -d /sys/module/$m ]] && echo "$m"; done)"
	pass "no iWARP device: iwarp.conf (${mods[*]}) not loaded"
}

# The RDMA netlink monitor (6.12+): rdmad holds a NETLINK_RDMA socket in the
# notify group (RDMA_NL_GROUP_NOTIFY = 4, bit 3 of the groups mask). Older
# kernels: one info line, no socket.
netlink_rdma_groups_of() { # netlink_rdma_groups_of PID: groups masks of PID's NETLINK_RDMA sockets
	local pid=$1 ino
	declare -A mine=()
	for ino in $(find "/proc/$pid/fd" -lname 'socket:*' -printf '%l\n' 2>/dev/null | tr -dc '0-9\n'); do mine[$ino]=1; done
	# /proc/net/netlink: sk Eth Pid Groups Rmem Wmem Dump Locks Drops Inode
	# (if, not &&: the loop's status would be that of the last line's test)
	awk 'NR > 1 && $2 == 20 { print $4, $10 }' /proc/net/netlink | while read -r groups ino; do
		if [[ -n ${mine[$ino]:-} ]]; then echo "$groups"; fi
	done
}
subscribed_to_notify() { netlink_rdma_groups_of "$(rdmad_pid)" | matches -E '^[0-9a-f]*[89a-f]$'; }
s_rdma-monitor() {
	local pid sys logs
	pid=$(rdmad_pid)
	sys=$(rdma system show 2>&1 | tr -s ' ' | head -n1)
	logs=$(rdmad_journal | grep -ciE 'RDMA netlink monitor')
	if kernel_at_least 6 12; then
		wait_for 10 subscribed_to_notify ||
			fail "rdmad (pid $pid) holds no NETLINK_RDMA socket in group 4: $(netlink_rdma_groups_of "$pid" | tr '\n' ' '); journal: $(rdmad_journal | grep -i monitor | tail -n 2 | tr '\n' ' ')"
		rdmad_journal | matches 'following the RDMA netlink monitor' || fail "no 'following the RDMA netlink monitor' in rdmad's journal"
		pass "pid $pid NETLINK_RDMA groups $(netlink_rdma_groups_of "$pid" | tr '\n' ' ')(notify = 00000008); rdma system: $sys"
	fi
	((logs == 1)) || fail "kernel $(uname -r): want exactly one monitor line in rdmad's journal, got $logs: $(rdmad_journal | grep -i monitor | tr '\n' ' ' | cut -c1-200)"
	rdmad_journal | matches 'kernel has no RDMA netlink monitor' || fail "no fallback line in rdmad's journal"
	! subscribed_to_notify || fail "rdmad subscribed to NETLINK_RDMA group 4 on a kernel without the monitor"
	pass "kernel $(uname -r): no monitor, one info line, uevents only; rdma system: $sys"
}

# Which events the kernel sends for each change, per kernel: uevents
# (udevadm monitor --kernel) and RDMA netlink monitor messages (rdma monitor,
# 6.12+). Reported as E2E-INFO lines for docs/decisions/kernel-events.md; the
# facts rdmad relies on are asserted.
capture() { # capture STEP CMD...: run CMD with both monitors listening; print what came
	local step=$1 u m
	shift
	u=$(mktemp) m=$(mktemp)
	udevadm monitor --kernel --subsystem-match=infiniband --subsystem-match=net >"$u" 2>&1 &
	local up=$!
	local mp=
	if kernel_at_least 6 12; then rdma monitor >"$m" 2>&1 & mp=$!; fi
	sleep 1
	"$@" >/dev/null 2>&1
	sleep 1.5
	kill "$up" ${mp:+"$mp"} 2>/dev/null
	wait "$up" ${mp:+"$mp"} 2>/dev/null
	# KERNEL[12.345678] add      /devices/virtual/infiniband/rxe7 (infiniband)
	events_uevent=$(grep -E '^KERNEL\[' "$u" | awk '{print $2, $4, $3}' | sed 's|/devices/virtual/||' | paste -sd ';' -)
	events_monitor=$(grep -vE '^$' "$m" | tr -s ' \t' ' ' | paste -sd ';' -)
	[[ -n ${mp:-} ]] || events_monitor="(no RDMA netlink monitor in kernel $(uname -r))"
	info "kernel-events $step | uevent: ${events_uevent:-none} | monitor: ${events_monitor:-none}"
	rm -f "$u" "$m"
}
s_kernel-events() {
	local monitor=0 out
	kernel_at_least 6 12 && monitor=1
	ensure_veth veth6 veth7 || fail "cannot create veth6/veth7"
	out=$(
		capture "rdma link add rxe7 type rxe netdev veth6" rdma link add rxe7 type rxe netdev veth6
		[[ $events_uevent == *"add (infiniband)"*rxe7* ]] || echo "FAIL no infiniband add uevent for rdma link add"
		((monitor == 0)) || [[ $events_monitor == *REGISTER*rxe7* ]] || echo "FAIL no monitor REGISTER for rdma link add"
		capture "ip link del veth6 (netdev under rxe7)" ip link del veth6
		[[ $events_uevent == *"remove (infiniband)"* ]] || echo "FAIL no infiniband remove uevent when the netdev under rxe7 went"
		capture "ip link add veth6 type veth peer name veth7" ip link add veth6 type veth peer name veth7
		ip link set veth6 up
		capture "rdma link add rxe7 again" rdma link add rxe7 type rxe netdev veth6
		capture "rdma dev set rxe7 name rxe8" rdma dev set rxe7 name rxe8
		[[ $events_uevent == *"move (infiniband)"* ]] || echo "FAIL no infiniband move uevent for a rename"
		capture "rdma link del rxe8" rdma link del rxe8
		[[ $events_uevent == *"remove (infiniband)"* ]] || echo "FAIL no infiniband remove uevent for rdma link del"
		((monitor == 0)) || [[ $events_monitor == *UNREGISTER*rxe8* ]] || echo "FAIL no monitor UNREGISTER for rdma link del"
	)
	grep -v '^FAIL' <<<"$out"
	! grep -q '^FAIL' <<<"$out" || fail "$(grep '^FAIL' <<<"$out" | head -n1 | cut -c6-)"
	pass "uevents$( ((monitor)) && echo " and RDMA monitor events") recorded for link add/del, netdev del/add, rename (E2E-INFO lines)"
}

# `rdma dev set rxe0 name rxe5`: the kernel renames in place (uevent move);
# rdmad must move the D-Bus object, apply the policy of the new name
# (rxe5: TOS 72) and leave nothing under the old one. Then back.
s_rename() {
	local sig out objs json
	rdma_dev_exists rxe0 || fail "rxe0 missing before the test"
	tos_is rxe0 "$declared_tos" || fail "rxe0 tos '$(tos_of rxe0)' before the test"
	sig=$(mktemp)
	busctl --system --json=short monitor --match "type='signal',sender='org.rdmad1',interface='org.freedesktop.DBus.ObjectManager'" >"$sig" 2>/dev/null &
	local mon=$!
	sleep 1
	rdma dev set rxe0 name rxe5 || fail "rdma dev set rxe0 name rxe5 failed"
	wait_for 5 tos_is rxe5 "$renamed_tos" || fail "rxe5/1 tos '$(tos_of rxe5)' 5s after the rename, declared $renamed_tos for rxe5"
	wait_for 5 not dbus_object rxe0 || fail "D-Bus object /org/rdmad1/devices/rxe0 still there after the rename"
	dbus_object rxe5 || fail "no D-Bus object /org/rdmad1/devices/rxe5"
	sleep 0.5
	kill "$mon" 2>/dev/null; wait "$mon" 2>/dev/null
	jq -e -s 'any(.[]; .member == "InterfacesRemoved" and .payload.data[0] == "/org/rdmad1/devices/rxe0")' "$sig" >/dev/null ||
		fail "no InterfacesRemoved for /org/rdmad1/devices/rxe0: $(jq -c -s '[.[] | [.member, .payload.data[0]]]' "$sig" | cut -c1-200)"
	jq -e -s 'any(.[]; .member == "InterfacesAdded" and .payload.data[0] == "/org/rdmad1/devices/rxe5")' "$sig" >/dev/null ||
		fail "no InterfacesAdded for /org/rdmad1/devices/rxe5: $(jq -c -s '[.[] | [.member, .payload.data[0]]]' "$sig" | cut -c1-200)"
	rm -f "$sig"
	# Nothing under the old name: configfs rdma_cm/rxe0 is gone, or unused
	# (its attributes look the device up by name: ENODEV without an rxe0).
	if [[ -d $cm/rxe0 ]] && cat "$cm/rxe0/ports/1/default_roce_tos" >/dev/null 2>&1; then
		fail "configfs rdma_cm/rxe0 still reaches a device after the rename"
	fi
	json=$(rdmactl -o json status)
	jq -e '([.devices[].name] | index("rxe0") | not) and any(.devices[]; .name == "rxe5" and .ports[0].roce_tos == 72)' >/dev/null <<<"$json" ||
		fail "rdmactl after the rename: $(jq -c '[.devices[] | [.name, .ports[0].roce_tos]]' <<<"$json")"
	objs=$(dbus_objects | grep -E '^/org/rdmad1/devices/[^/]+$' | tr '\n' ' ')
	# Back: rxe0 gets the policy of its name again (the kernel kept 72).
	rdma dev set rxe5 name rxe0 || fail "rdma dev set rxe5 name rxe0 failed"
	wait_for 5 tos_is rxe0 "$declared_tos" || fail "renamed back: rxe0/1 tos '$(tos_of rxe0)', declared $declared_tos"
	wait_for 5 dbus_object rxe0 || fail "renamed back: no /org/rdmad1/devices/rxe0"
	! dbus_object rxe5 || fail "renamed back: /org/rdmad1/devices/rxe5 still there"
	pass "rxe5 tos $renamed_tos, objects: $objs; rdma_cm/rxe0 $([[ -d $cm/rxe0 ]] && echo unused || echo gone); back to rxe0 tos $(tos_of rxe0)"
}

# [netns] mode = "exclusive" while another network namespace exists: the
# kernel refuses (EBUSY); rdmad says so, and that it applies at next boot,
# and already wrote the modprobe.d option.
s_netns-busy() {
	local act out
	[[ $(rdma_netns_mode) == shared ]] || fail "RDMA netns mode is '$(rdma_netns_mode)' before the test"
	ip netns add e2ebusy || fail "ip netns add e2ebusy failed"
	printf '# added by the rdmad e2e test\n[netns]\nmode = "exclusive"\n' >"$netns_dropin"
	out=$(rdmactl reload 2>&1)
	act=$(describe | jq -c '[.actions[] | select(.subject.kind == "host" and (.kind | startswith("netns")))]')
	jq -e 'any(.[]; .kind == "netns mode" and .status == "failed" and (.error | test("EBUSY")) and (.error | test("next boot")))' >/dev/null <<<"$act" ||
		fail "netns actions after reload: $act; rdmactl reload: $out"
	grep -qx 'options ib_core netns_mode=0' /etc/modprobe.d/rdmad-netns.conf 2>/dev/null ||
		fail "/etc/modprobe.d/rdmad-netns.conf: $(cat /etc/modprobe.d/rdmad-netns.conf 2>&1 | tr '\n' ' ')"
	[[ $(rdma_netns_mode) == shared ]] || fail "RDMA netns mode switched to '$(rdma_netns_mode)' although a netns exists"
	rdmad_journal | grep -F 'EBUSY' | matches 'next boot' || fail "rdmad's journal does not explain the EBUSY"
	pass "refused while netns e2ebusy exists: $(jq -r '.[] | select(.kind == "netns mode") | .error' <<<"$act" | cut -c1-150)"
}

# The other namespaces are gone: the next pass switches the running kernel.
# A service with PrivateNetwork=yes holds a namespace too (polkitd on trixie,
# polkit 126): such a holder is stopped for the switch (polkit is started on
# demand again). A deleted namespace is freed asynchronously, so the pass is
# retried for a while.
netns_holders() { # "PID comm" of processes outside PID 1's network namespace
	local init p
	init=$(readlink /proc/1/ns/net)
	for p in /proc/[0-9]*; do
		[[ $(readlink "$p/ns/net" 2>/dev/null || echo "$init") == "$init" ]] || echo "${p#/proc/} $(cat "$p/comm" 2>/dev/null)"
	done
}
switched_exclusive() {
	rdmactl reload >/dev/null 2>&1
	[[ $(rdma_netns_mode) == exclusive ]]
}
s_netns-runtime() {
	local act holders stopped=
	ip netns del e2ebusy 2>/dev/null
	holders=$(netns_holders | tr '\n' ';')
	if grep -q ' polkitd' <<<"$(netns_holders)"; then
		stopped=" (stopped polkitd: PrivateNetwork=yes)"
		systemctl stop polkit.service
	fi
	wait_for 20 switched_exclusive ||
		fail "RDMA netns mode still '$(rdma_netns_mode)' after reloads$stopped; outside the init netns: $(netns_holders | tr '\n' ';')"
	act=$(describe | jq -c '[.actions[] | select(.subject.kind == "host" and .kind == "netns mode")]')
	jq -e 'length == 1 and (.[0].status == "changed" or .[0].status == "unchanged") and .[0].to == "exclusive"' >/dev/null <<<"$act" ||
		fail "netns mode action: $act"
	# The journal line reboot-netns must not find in boot 2.
	rdmad_journal | matches "$netns_switched" ||
		fail "rdmad's journal has no runtime switch from shared to exclusive"
	rdma_dev_exists rxe0 && tos_is rxe0 "$declared_tos" || fail "rxe0 lost its policy with the mode switch"
	pass "rdma system: netns $(rdma_netns_mode)$stopped; other netns were held by: ${holders:-nothing}; action $(jq -c '.[0] | [.status, .from, .to]' <<<"$act")"
}

# Boot 2: exclusive from the start, through modprobe.d alone.
s_reboot-netns() {
	local param mode switched initrd
	[[ -e $netns_dropin ]] || fail "$netns_dropin missing: boot 1 did not get to the netns scenarios"
	wait_for 30 test -e /sys/module/ib_core || fail "ib_core never loaded"
	param=$(cat /sys/module/ib_core/parameters/netns_mode 2>&1)
	mode=$(rdma_netns_mode)
	[[ $mode == exclusive ]] || fail "RDMA netns mode after reboot is '$mode' (ib_core netns_mode=$param)"
	[[ $param == N ]] || fail "ib_core parameter netns_mode is '$param'"
	# rdmad never had to switch it in this boot.
	switched=$(rdmad_journal | grep -E "$netns_switched" | head -n1)
	[[ -z $switched ]] || fail "rdmad switched the mode at runtime in this boot: $switched"
	initrd=$(lsinitramfs "/boot/initrd.img-$(uname -r)" 2>/dev/null | grep -c '/ib_core\.ko')
	pass "netns exclusive from boot (ib_core netns_mode=$param, ib_core in initramfs: $initrd); rdmad did not switch"
}

# ---------------------------------------------------------------- metrics

metrics_file=/var/lib/prometheus/node-exporter/rdmad.prom # a directory the unit may write
metrics_dropin=/etc/rdma/rdmad.d/70-e2e-metrics.toml
drift_line() { printf 'rdmad_port_drift{device="%s",port="%s",setting="%s"} %s' "$@"; }
metrics_have() { # metrics_have LINE...: the file has every LINE
	local l
	for l; do grep -qxF "$l" "$metrics_file" 2>/dev/null || return 1; done
}
# metrics_invalid: the lines of the file that are not Prometheus text format
# (comment, or `name{label="value",...} number`, no timestamp).
metrics_invalid() {
	grep -vE '^(#.*|[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? -?[0-9.eE+-]+|[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})? (NaN|[+-]Inf))$' "$metrics_file"
}

# [metrics] textfile set by a drop-in and a reload: node_exporter's textfile
# shows that rxe9 (made by roce-v1-error; rxe is RoCE v2 only) does not hold
# its declared v1, and that the ports holding their TOS do.
s_metrics() {
	local t0 took want bad age out
	rdma_dev_exists rxe9 || fail "rxe9 missing (roce-v1-error makes it)"
	[[ -d ${metrics_file%/*} ]] || fail "${metrics_file%/*} missing in the image"
	[[ ! -e $metrics_file ]] || fail "$metrics_file exists before [metrics] is configured"
	want=("$(drift_line rxe9 1 roce_mode 1)" "$(drift_line rxe9 1 roce_tos 0)" "$(drift_line rxe0 1 roce_tos 0)")
	printf '# added by the rdmad e2e test\n[metrics]\ntextfile = "%s"\n' "$metrics_file" >"$metrics_dropin"
	t0=$(now)
	# rxe9's refused mode makes the reload's pass fail (exit 1) by design;
	# the configuration itself must load.
	out=$(rdmactl reload 2>&1) || matches 'the configuration loaded, but applying it failed' <<<"$out" ||
		fail "rdmactl reload with [metrics]: $out"
	wait_for 10 metrics_have "${want[@]}" ||
		fail "$metrics_file after 10s: $(grep -E '^rdmad_(port_drift|failures)' "$metrics_file" 2>&1 | tr '\n' ';' | cut -c1-300)"
	took=$(elapsed "$t0")
	bad=$(metrics_invalid)
	[[ -z $bad ]] || fail "not Prometheus text format: $(head -n 3 <<<"$bad" | tr '\n' ';')"
	[[ $(stat -c %a "$metrics_file") == 644 ]] || fail "$metrics_file has mode $(stat -c %a "$metrics_file"), want 644"
	# Only declared settings have a series: rxe0 declares no mode; siw0's
	# RoCE rule does not apply to iWARP.
	! grep -qE '^rdmad_port_drift\{device="(rxe0",port="1",setting="roce_mode|siw0)' "$metrics_file" ||
		fail "a series for a setting that is not declared or does not apply: $(grep -E 'device="(rxe0|siw0)"' "$metrics_file" | tr '\n' ';')"
	grep -qE '^rdmad_failures\{subject_kind="port"\} [1-9]' "$metrics_file" || fail "rdmad_failures{subject_kind=\"port\"} is not >= 1 with rxe9 failing"
	age=$(awk -v now="$(date +%s)" '/^rdmad_last_reconcile_timestamp_seconds / { printf "%.0f", now - $2 }' "$metrics_file")
	[[ -n $age ]] && ((age >= 0 && age < 60)) || fail "rdmad_last_reconcile_timestamp_seconds is ${age:-missing}s old"
	awk -v t="$took" 'BEGIN { exit !(t <= 5.0) }' || fail "the drift showed ${took}s after the reload, want within 5s"
	pass "${took}s after the reload: rxe9/1 roce_mode 1, roce_tos 0; rxe0/1 roce_tos 0; $(grep -c '^rdmad_port_drift' "$metrics_file") drift series, valid text"
}

# ---------------------------------------------------------------- lossless RoCE ([[qos]])

qos_dropin=/etc/rdma/rdmad.d/75-e2e-qos.toml
qos_acts() { # the rxe9/1 qos actions of rdmactl -o json status, as one JSON array
	describe | jq -c '[.actions[] | select(.subject.kind == "port" and .subject.device == "rxe9" and (.kind | startswith("qos")))]'
}
qos_failed() { # qos_failed KIND: rxe9/1's action of KIND failed
	qos_acts | jq -e --arg k "$1" 'any(.[]; .kind == $k and .status == "failed")' >/dev/null
}
qos_cleanup() {
	rm -f "$qos_dropin"
	rdmactl reload >/dev/null 2>&1
}

# A [[qos]] rule on a Soft-RoCE device whose netdev is a veth, which has no
# DCB, no global pause and no ethtool tunables (rxe9 on veth3, made by
# roce-v1-error): rdmad's DCB GET reaches the kernel and is refused with
# EOPNOTSUPP (not EINVAL, which a malformed request gets, nor ENODEV, a
# wrong name), each DCB setting fails with the operator's message; the
# ethtool pause request and the PFC storm timeout ioctl, made by the real
# rdmad under the real unit, reach the veth's driver and are refused named
# (EOPNOTSUPP: neither the sandbox's EPERM nor EAFNOSUPPORT); ECN, which
# only OFED drivers have, is not applicable; all show as drift, and the
# device's TOS is applied all the same. iproute2's dcb, asked the same,
# gets the same refusal.
s_qos-veth() {
	local out err trust kind na doc
	rdma_dev_exists rxe9 || fail "rxe9 missing (roce-v1-error makes it)"
	trap qos_cleanup EXIT
	out=$(dcb pfc show dev veth3 2>&1) && fail "dcb pfc show dev veth3 succeeded on a veth: $out"
	matches -i 'not supported' <<<"$out" || fail "dcb pfc show dev veth3: $out (want EOPNOTSUPP)"
	printf '# added by the rdmad e2e test\n[[qos]]\ndevice = "rxe9"\ntrust = "dscp"\npfc = [3]\ncable_length = 10\nprio_tc = [0,0,0,1,0,0,0,0]\ntc_maxrate = ["0","25Gbit","0","0","0","0","0","0"]\npause = false\npfc_storm_timeout = 100\necn = [3]\n' >"$qos_dropin"
	out=$(rdmactl reload 2>&1) || matches 'the configuration loaded, but applying it failed' <<<"$out" ||
		fail "rdmactl reload with [[qos]]: $out"
	wait_for 10 qos_failed "qos pfc" || fail "no failed qos pfc action for rxe9/1: $(qos_acts | cut -c1-300)"
	for kind in "qos trust" "qos cable length" "qos prio_tc" "qos tc_maxrate" "qos pause" "qos pfc_storm_timeout"; do
		qos_failed "$kind" || fail "no failed $kind action for rxe9/1: $(qos_acts | cut -c1-400)"
		err=$(qos_acts | jq -r --arg k "$kind" '.[] | select(.kind == $k) | .error')
		matches -F veth3 <<<"$err" || fail "$kind: the error does not name veth3: $err"
		matches -i 'operation not supported' <<<"$err" || fail "$kind: the kernel's answer is not EOPNOTSUPP: $err"
		not matches -iE 'invalid argument|no such device|not permitted|address family' <<<"$err" || fail "$kind: EINVAL, ENODEV or the sandbox: $err"
	done
	err=$(qos_acts | jq -r '.[] | select(.kind == "qos pfc") | .error')
	matches -F 'veth3 does not support DCB: PFC, trust and the other DCB settings cannot be set' <<<"$err" || fail "qos pfc error: $err"
	matches -F 'veth3 has no global pause setting' <<<"$(qos_acts | jq -r '.[] | select(.kind == "qos pause") | .error')" ||
		fail "qos pause error: $(qos_acts | jq -r '.[] | select(.kind == "qos pause") | .error')"
	matches -F 'veth3 has no PFC storm prevention' <<<"$(qos_acts | jq -r '.[] | select(.kind == "qos pfc_storm_timeout") | .error')" ||
		fail "qos pfc_storm_timeout error: $(qos_acts | jq -r '.[] | select(.kind == "qos pfc_storm_timeout") | .error')"
	na=$(qos_acts | jq -r '.[] | select(.kind == "qos ecn") | .status')
	[[ $na == not-applicable ]] || fail "qos ecn on an upstream veth: $na, want not-applicable"
	tos_is rxe9 "$declared_tos" || fail "rxe9/1 tos is '$(tos_of rxe9)': the QoS failure must not stop the TOS ($declared_tos)"
	wait_for 10 metrics_have "$(drift_line rxe9 1 qos_pfc 1)" "$(drift_line rxe9 1 qos_trust 1)" "$(drift_line rxe9 1 qos_pause 1)" "$(drift_line rxe9 1 qos_pfc_storm_timeout 1)" ||
		fail "no qos drift in $metrics_file: $(grep -E 'rxe9' "$metrics_file" 2>&1 | tr '\n' ';' | cut -c1-400)"
	rdmad_journal | grep -F rxe9 | matches -F 'does not support DCB' || fail "rdmad's journal does not say veth3 has no DCB"
	rdmad_journal | grep -F rxe9 | matches -F 'has no PFC storm prevention' || fail "rdmad's journal does not say veth3 has no storm prevention"
	# Doctor fails the refused settings, naming the netdev.
	doc=$(rdmactl -o json doctor 2>/dev/null | jq -r '.[] | select(.id == "qos-pfc-differs" and .subject.device == "rxe9") | "\(.severity) \(.finding)"')
	[[ $doc == fail* ]] && matches -F veth3 <<<"$doc" || fail "doctor on rxe9's refused PFC: '$doc', want a fail naming veth3"
	trust=$(qos_acts | jq -r '.[] | select(.kind == "qos trust") | .status')
	pass "rxe9 tos $declared_tos; DCB, pause and storm timeout refused by veth3 (EOPNOTSUPP, named); ecn $na; qos trust $trust; drift 1"
}

# rdmad's mlx4_en options file, as the real kmod reads it: rdmad --once on a
# fixture host with a ConnectX-3 Ethernet port (sysfs made by hand under a
# temporary root) renders pfc = [3], and modprobe -C lists the options.
s_qos-mlx4-options() {
	local root dev pci out file
	root=$(mktemp -d) || fail "mktemp"
	pci=$root/sys/bus/pci/devices/0000:04:00.0
	dev=$root/sys/class/infiniband/mlx4_0
	mkdir -p "$pci/net/ens2" "$root/sys/bus/pci/drivers/mlx4_core" "$dev/ports/2" "$root/etc/rdma" || fail "mkdir fixture"
	ln -s ../../../../bus/pci/drivers/mlx4_core "$pci/driver"
	ln -s ../../../bus/pci/devices/0000:04:00.0 "$dev/device"
	echo "1: CA" >"$dev/node_type"
	echo Ethernet >"$dev/ports/2/link_layer"
	echo "4: ACTIVE" >"$dev/ports/2/state"
	printf '[modules]\nenable = false\n\n[[qos]]\ndevice = "mlx4_0"\npfc = [3]\n' >"$root/etc/rdma/rdmad.toml"
	# With --root rdmad refuses DCB netlink (it would act on this kernel): that port fails; the file is host-wide.
	out=$(rdmad --once --root "$root" --bus none 2>&1)
	file=$root/etc/modprobe.d/rdmad-mlx4-pfc.conf
	[[ -f $file ]] || fail "rdmad --once wrote no $file: $(tail -n 5 <<<"$out" | tr '\n' ' ')"
	out=$(modprobe -C "$root/etc/modprobe.d" -c 2>&1) || fail "modprobe -C refused rdmad's file: $out"
	matches -x 'options mlx4_en pfctx=0x08 pfcrx=0x08' <<<"$out" ||
		fail "modprobe -c: $(grep -i mlx4 <<<"$out" | tr '\n' ';'); file: $(tr '\n' ';' <"$file")"
	rm -rf "$root"
	pass "modprobe -C lists: options mlx4_en pfctx=0x08 pfcrx=0x08"
}

# ---------------------------------------------------------------- package lifecycle

pkg_dir=/var/lib/rdmad-e2e/packages # the .debs run.sh built, and packages.env
conffile=/etc/rdma/rdmad.toml
conffile_edit="# e2e: the administrator's edit before the upgrade"
edited_tos=104       # the edit declares it for rxe0
memlock_dropin=/etc/systemd/system.conf.d/90-rdmad-memlock.conf
upgrade_memlock=/etc/rdma/rdmad.d/00-upgrade-memlock.toml # the preinst's (docs/decisions/packaging.md)
admin_dropin=/etc/rdma/rdmad.d/55-e2e-admin.toml
admin_tos=40         # the admin's drop-in declares it for rxe0
load_packages() { . "$pkg_dir/packages.env" || fail "no $pkg_dir/packages.env"; }
pkg_status() { dpkg-query -W -f '${Status} ${Version}' rdmad 2>/dev/null; }
unit_prop() { systemctl show -p "$1" --value rdmad.service 2>/dev/null; }
set_tos() { echo "$3" >"$cm/$1/ports/$2/default_roce_tos"; } # set_tos DEV PORT TOS: by hand, as drift
# drift_report: the running rdmad leaves a value set by hand ([drift] action
# = "report"; under "correct" it would put it back at once), so what a new
# process applies at its start shows. Kept to the end of the boot: an
# administrator's drop-in as far as the purge is concerned.
drift_report_dropin=/etc/rdma/rdmad.d/60-e2e-drift-report.toml
drift_report() {
	[[ -e $drift_report_dropin ]] && return 0
	printf '# added by the rdmad e2e test\n[drift]\naction = "report"\n' >"$drift_report_dropin"
	rdmactl reload >/dev/null 2>&1
	return 0
}
rdmad_running() { pgrep -x rdmad >/dev/null; }
restarted_from() { # restarted_from PID: rdmad.service is active with another main PID
	local pid
	pid=$(unit_prop MainPID)
	[[ $(unit_prop ActiveState) == active && $pid != 0 && $pid != "$1" ]]
}

# upgrade_over_edit NAME DPKG-CMD...: upgrade to the package NAME of
# packages.env with DPKG-CMD (dpkg -i ... PACKAGE appended) over the edited
# conffile, and check what an administrator relies on: the edit is kept
# byte for byte, the new shipped default is beside it as .dpkg-dist, the new
# version runs, rdmad was restarted (new PID, new start time, not a crash
# restart), and the new process applies the policy (a TOS set by hand is
# back). Sets upgrade_out (dpkg's output) and upgrade_detail.
upgrade_over_edit() {
	local name=$1 file version binary sum pid ts nrestarts cursor newpid newts out json status
	shift
	file=pkg_$name version=pkg_${name}_version binary=bin_${name}_version
	file=$pkg_dir/${!file} version=${!version} binary=${!binary}
	grep -qxF "$conffile_edit" "$conffile" || fail "$conffile has no edit"
	wait_for 10 tos_is rxe0 "$edited_tos" || fail "rxe0/1 tos '$(tos_of rxe0)' before the upgrade, the edit declares $edited_tos"
	drift_report
	set_tos rxe0 1 0 || fail "cannot set rxe0/1 tos by hand"
	sleep 0.5
	tos_is rxe0 0 || fail "rxe0/1 tos '$(tos_of rxe0)' after it was set to 0 by hand under [drift] action = \"report\""
	sum=$(sha256sum <"$conffile")
	pid=$(unit_prop MainPID) ts=$(unit_prop ExecMainStartTimestampMonotonic) nrestarts=$(unit_prop NRestarts)
	((pid > 0)) || fail "rdmad is not running before the upgrade"
	cursor=$(journal_cursor)
	upgrade_out=$("$@" "$file" 2>&1) || fail "$* ${file##*/}: $(tail -n 5 <<<"$upgrade_out" | tr '\n' ' ')"
	[[ $(pkg_status) == "install ok installed $version" ]] || fail "after the upgrade: $(pkg_status), want $version"
	# The edit, byte for byte; the new default beside it; no dpkg leftovers.
	[[ $(sha256sum <"$conffile") == "$sum" ]] || fail "the upgrade changed the edited $conffile: $(diff <(dpkg-deb --fsys-tarfile "$file" | tar -xOf - ./etc/rdma/rdmad.toml) "$conffile" | head -n 5 | tr '\n' ' ')"
	cmp -s "$conffile.dpkg-dist" <(dpkg-deb --fsys-tarfile "$file" | tar -xOf - ./etc/rdma/rdmad.toml) ||
		fail "$conffile.dpkg-dist is not the new package's shipped default: $(ls -l "$conffile".* 2>&1 | tr '\n' ' ')"
	[[ ! -e $conffile.dpkg-new && ! -e $conffile.dpkg-old ]] || fail "the upgrade left $(ls "$conffile".dpkg-* | tr '\n' ' ')"
	# Restarted by the postinst (try-restart), not by a crash.
	wait_for 30 restarted_from "$pid" || fail "rdmad.service not restarted: $(unit_prop ActiveState), main PID $(unit_prop MainPID) (was $pid)"
	newpid=$(unit_prop MainPID) newts=$(unit_prop ExecMainStartTimestampMonotonic)
	((newts > ts)) || fail "ExecMainStartTimestampMonotonic $newts not after $ts"
	[[ $(unit_prop NRestarts) == "$nrestarts" ]] || fail "NRestarts went from $nrestarts to $(unit_prop NRestarts): a crash restart"
	# The new version runs: the binary, and the daemon on the bus.
	out=$(rdmad --version 2>&1)
	[[ $out == "rdmad $binary" ]] || fail "rdmad --version: '$out', want 'rdmad $binary'"
	[[ $(readlink "/proc/$newpid/exe") == /usr/sbin/rdmad ]] || fail "main PID $newpid runs $(readlink "/proc/$newpid/exe")"
	wait_for 20 bash -c '[[ -n $(rdmactl -o json status 2>/dev/null | jq -r ".last_result // empty") ]]'
	json=$(rdmactl -o json status 2>&1) || fail "rdmactl -o json status after the upgrade: $json"
	[[ $(jq -r .version <<<"$json") == "$binary" ]] || fail "rdmactl status version '$(jq -r .version <<<"$json")', want $binary"
	status=$(rdmactl status 2>&1 | head -n1)
	[[ $status == "rdmad $binary:"* ]] || fail "rdmactl status: '$status'"
	# The new process applies the kept edit: the TOS set by hand is back.
	wait_for 10 tos_is rxe0 "$edited_tos" || fail "rxe0/1 tos '$(tos_of rxe0)' after the upgrade, the kept edit declares $edited_tos"
	# When the preinst writes rdmad.d/00-upgrade-memlock.toml (the first
	# upgrade, s_pkg-upgrade), the old rdmad reloads on it during the
	# upgrade and reapplies the TOS itself; the second upgrade writes
	# nothing and proves the new process applies it.
	local by=(_PID="$newpid") who="the new rdmad (pid $newpid)"
	if [[ ${upgrade_reloads:-} == 1 ]]; then
		by=() who="rdmad.service (old pid $pid on its reload, or new pid $newpid)"
	fi
	journal_since "$cursor" "${by[@]}" |
		matches -E "msg=applied subject=rxe0/1 what=\"roce tos\" from=0 to=$edited_tos" ||
		fail "the journal of $who has no 'applied' rxe0/1 tos 0 -> $edited_tos"
	[[ ! -e $metrics_file ]] || wait_for 5 grep -qF "rdmad_build_info{version=\"$binary\"," "$metrics_file" ||
		fail "$metrics_file after the restart: $(grep '^rdmad_build_info' "$metrics_file")"
	upgrade_detail="$version, pid $pid -> $newpid, edit kept, .dpkg-dist is the new default, rxe0/1 tos 0 -> $edited_tos by ${who%% (*}"
}

# What a fleet does (apt, Ansible's apt module): --force-confold, nothing
# asked; the conffile carries the administrator's edit (the test policy
# installed over the shipped one, and one more rule added now).
s_pkg-upgrade() {
	load_packages
	[[ $(pkg_status) == "install ok installed $pkg_install_version" ]] ||
		fail "before the upgrade: $(pkg_status), want $pkg_install_version installed in the image"
	[[ $(unit_prop UnitFileState) == enabled ]] || fail "rdmad.service is $(unit_prop UnitFileState) (the postinst enables it)"
	printf '\n%s\n[[roce]]\ndevice = "rxe0"\ntos = %d\n' "$conffile_edit" "$edited_tos" >>"$conffile"
	rdmactl reload >/dev/null 2>&1 || fail "rdmactl reload of the edit: $(rdmactl reload 2>&1 | tail -n 2)"
	[[ -f $memlock_dropin && ! -e $upgrade_memlock ]] || fail "before the upgrade: $memlock_dropin $(ls "$memlock_dropin" 2>&1), $upgrade_memlock $(ls "$upgrade_memlock" 2>&1)"
	upgrade_reloads=1 upgrade_over_edit fleet dpkg -i --force-confold </dev/null
	# rdmad's DefaultLimitMEMLOCK= drop-in was there and no drop-in sets
	# services: the preinst keeps services on (rdmad.toml(5)), says so, and
	# the new rdmad keeps its drop-in.
	grep -qF "wrote $upgrade_memlock (services = true)" <<<"$upgrade_out" || fail "the upgrade did not say it kept services on: $(tail -n 5 <<<"$upgrade_out" | tr '\n' ' ')"
	[[ $(head -c 18 "$upgrade_memlock" 2>/dev/null) == '# Managed by rdmad' ]] && grep -qx 'services = true' "$upgrade_memlock" ||
		fail "$upgrade_memlock: $(tr '\n' ' ' <"$upgrade_memlock" 2>&1)"
	describe | jq -e --arg f "$upgrade_memlock" '.config_files | index($f)' >/dev/null || fail "rdmactl status: $upgrade_memlock not among the config files in force"
	[[ $(head -c 18 "$memlock_dropin" 2>/dev/null) == '# Managed by rdmad' ]] || fail "$memlock_dropin gone after the upgrade"
	pass "dpkg -i --force-confold: $upgrade_detail; services kept on by ${upgrade_memlock##*/}"
}

# An administrator at the terminal: plain dpkg -i asks about the edited
# conffile; the default answer (Enter) keeps it.
s_pkg-upgrade-prompt() {
	load_packages
	[[ $(pkg_status) == "install ok installed $pkg_fleet_version" ]] || fail "before: $(pkg_status), want $pkg_fleet_version"
	upgrade_over_edit prompt sh -c 'printf "\n" | dpkg -i "$1"' sh
	! grep -qF "$upgrade_memlock" <<<"$upgrade_out" || fail "the second upgrade wrote $upgrade_memlock again: $(grep -F "$upgrade_memlock" <<<"$upgrade_out")"
	grep -qF "Configuration file '$conffile'" <<<"$upgrade_out" || fail "dpkg did not ask about $conffile: $(tail -n 8 <<<"$upgrade_out" | tr '\n' ' ')"
	grep -qi 'default action is to keep your current version' <<<"$upgrade_out" || fail "dpkg's question does not default to keeping the edit: $(grep -A8 'Configuration file' <<<"$upgrade_out" | tr '\n' ' ')"
	pass "plain dpkg -i asked, Enter kept the edit: $upgrade_detail"
}

# contrib/ansible/site.yml with ansible-playbook -c local (docs/fleet.md):
# the first run renders the drop-in from variables, rdmad reloads and the TOS
# reaches configfs; the second run changes nothing.
ansible_recap() { grep -E '^localhost +: ok=' <<<"$1" | tail -n1 | tr -s ' '; }
s_ansible() {
	local args first second t0 t1 t2 recap1 recap2 pid cursor dropin=/etc/rdma/rdmad.d/50-ansible.toml
	command -v ansible-playbook >/dev/null || fail "ansible-playbook not installed in this image"
	load_packages
	[[ ! -e $dropin ]] || fail "$dropin exists before the first run"
	args=(-c local -i localhost, -e rdmad_hosts=localhost -e ansible_become=false
		-e "rdmad_package_path=$pkg_dir/$pkg_prompt" -e '{"rdmad_roce": [{"driver": "rdma_rxe", "tos": 32}]}'
		/usr/lib/rdmad-e2e/ansible/site.yml)
	# Pipelining, as fleets usually configure it (fewer processes per task).
	export HOME=/root LC_ALL=C.UTF-8 ANSIBLE_NOCOLOR=1 ANSIBLE_RETRY_FILES_ENABLED=0 ANSIBLE_PIPELINING=1
	pid=$(rdmad_pid) cursor=$(journal_cursor)
	t0=$(now)
	first=$(ansible-playbook "${args[@]}" 2>&1) || fail "first run failed: $(grep -E 'FAILED|fatal|ERROR' <<<"$first" | head -n 3 | tr '\n' ' ' | cut -c1-300)"
	t1=$(now)
	recap1=$(ansible_recap "$first")
	info "ansible-core $(dpkg-query -W -f '${Version}' ansible-core), first run $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", b - a }')s: $recap1"
	[[ $recap1 =~ changed=([0-9]+) ]] && ((BASH_REMATCH[1] > 0)) || fail "first run changed nothing: $recap1"
	# What the run did, read from the host: the drop-in, rdmad's reload (same
	# process), the kernel value.
	grep -qxF 'driver = "rdma_rxe"' "$dropin" && grep -qx 'tos = 32' "$dropin" || fail "$dropin: $(tr '\n' ' ' <"$dropin" 2>&1)"
	reloaded_with_dropin() { journal_since "$cursor" | matches -E 'configuration reloaded.*50-ansible\.toml'; }
	wait_for 5 reloaded_with_dropin || fail "rdmad's journal has no reload with $dropin after cursor '$cursor': $(journal_since "$cursor" | tail -n 2 | tr '\n' ' ')"
	describe | jq -e --arg f "$dropin" '.config_files | index($f)' >/dev/null || fail "rdmactl status: $dropin not among the config files in force"
	[[ $(rdmad_pid) == "$pid" ]] || fail "rdmad restarted (pid $pid -> $(rdmad_pid)); the role reloads"
	tos_is rxe0 32 || fail "rxe0/1 tos '$(tos_of rxe0)' after the playbook, declared 32 for driver rdma_rxe"
	t1=$(now)
	second=$(ansible-playbook "${args[@]}" 2>&1) || fail "second run failed: $(grep -E 'FAILED|fatal|ERROR' <<<"$second" | head -n 3 | tr '\n' ' ' | cut -c1-300)"
	t2=$(now)
	recap2=$(ansible_recap "$second")
	info "ansible second run $(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.0f", b - a }')s: $recap2"
	[[ $recap2 =~ changed=0\  && $recap2 =~ failed=0 ]] || fail "second run: $recap2; changed: $(grep -E '^changed:' <<<"$second" | tr '\n' ' ')"
	# A value rdmad rejects fails in validate (rdmad --check-config): the
	# drop-in does not change, rdmad is not reloaded.
	local before bad
	before=$(sha256sum <"$dropin")
	args=("${args[@]/\"tos\": 32/\"tos\": 300}")
	bad=$(ansible-playbook "${args[@]}" 2>&1) && fail "a run with tos 300 succeeded"
	matches -F 'failed to validate' <<<"$bad" && matches -E '50-ansible\.toml:[0-9]+: roce\[0\]\.tos: 300' <<<"$bad" ||
		fail "tos 300 did not fail in validate with rdmad's file:line: $(grep -E 'fatal|FAILED' <<<"$bad" | head -n 2 | cut -c1-300)"
	[[ $(sha256sum <"$dropin") == "$before" ]] || fail "the rejected drop-in landed: $(tr '\n' ' ' <"$dropin")"
	[[ -z $(config_error) ]] || fail "rdmad reports a config error after a validated run: $(config_error)"
	pass "first: $recap1; second: $recap2; rxe0/1 tos 32; tos 300 refused in validate, nothing landed"
}

# Remove, then purge: nothing of rdmad keeps running or comes back (a new
# RDMA device, a D-Bus call), the package's and rdmad's own files are gone,
# the administrator's drop-ins stay (docs/decisions/packaging.md).
rdmad_owned=(/etc/rdma/rdmad.d/zz-rdmad-persist.toml /etc/security/limits.d/90-rdmad-memlock.conf
	/etc/systemd/system.conf.d/90-rdmad-memlock.conf /etc/modprobe.d/rdmad-netns.conf
	/etc/rdma/rdmad.d/00-upgrade-memlock.toml /var/lib/rdmad/last-good-config.json /var/lib/rdmad/found.json)
hand_written=/etc/modprobe.d/rdmad-mlx4-pfc.conf # a path rdmad writes, here written by hand (no header)
package_files=(/usr/sbin/rdmad /usr/bin/rdmactl /usr/lib/systemd/system/rdmad.service /usr/lib/udev/rules.d/90-rdmad.rules
	/usr/share/dbus-1/system.d/org.rdmad1.conf /usr/share/dbus-1/system-services/org.rdmad1.service
	/usr/share/polkit-1/actions/org.rdmad1.policy /usr/lib/sysusers.d/rdmad.conf /usr/lib/tmpfiles.d/rdmad.conf
	/etc/rdma/rdmad.toml /etc/rdma/rdmad.toml.dpkg-dist
	/etc/systemd/system/multi-user.target.wants/rdmad.service /etc/systemd/system/dbus-org.rdmad1.service)
s_pkg-purge() {
	local f pid out admin left=() sums other=${metrics_file%/*}/e2e-other.prom
	load_packages
	# node_exporter's directory: rdmad's textfile (the metrics scenario) and
	# a file of another exporter.
	[[ -f $metrics_file ]] || fail "$metrics_file missing before the purge: the test would prove nothing"
	printf '# HELP e2e_other Another exporter.\n# TYPE e2e_other gauge\ne2e_other 1\n' >"$other"
	# Both kinds of /etc/rdma/rdmad.d files: the administrator's and rdmad's.
	printf '# the administrator'"'"'s (e2e)\n[[roce]]\ndevice = "rxe0"\ntos = %d\n' "$admin_tos" >"$admin_dropin"
	out=$(rdmactl roce set rxe0/1 --mode v2 --persist 2>&1) || fail "rdmactl roce set --persist: $out"
	for f in "${rdmad_owned[@]}"; do [[ -e $f ]] || fail "$f missing before the purge: the test would prove nothing"; done
	admin=$(find /etc/rdma/rdmad.d -type f ! -name zz-rdmad-persist.toml ! -name 00-upgrade-memlock.toml | sort)
	sums=$(xargs -r sha256sum <<<"$admin")
	pid=$(rdmad_pid)
	((pid > 0)) || fail "rdmad not running before the removal"

	out=$(dpkg -r rdmad 2>&1) || fail "dpkg -r rdmad: $(tail -n 3 <<<"$out" | tr '\n' ' ')"
	[[ $(pkg_status) == "deinstall ok config-files $pkg_prompt_version" ]] || fail "after dpkg -r: $(pkg_status)"
	wait_for 10 not rdmad_running || fail "rdmad still running after dpkg -r: $(pgrep -ax rdmad)"
	[[ $(unit_prop ActiveState) == inactive ]] || fail "rdmad.service is $(unit_prop ActiveState) after dpkg -r"
	[[ -e $conffile && -e ${rdmad_owned[0]} ]] || fail "dpkg -r removed the configuration"
	[[ ! -e /run/rdmad ]] || fail "/run/rdmad left after dpkg -r"
	printf 'options mlx4_en pfctx=0x08 pfcrx=0x08 # by hand\n' >"$hand_written"

	out=$(dpkg -P rdmad 2>&1) || fail "dpkg -P rdmad: $(tail -n 3 <<<"$out" | tr '\n' ' ')"
	! dpkg-query -W -f '${Status}' rdmad 2>/dev/null | matches -v 'not-installed' || fail "after dpkg -P: $(pkg_status)"
	for f in "${package_files[@]}" "${rdmad_owned[@]}" "$metrics_file"; do
		[[ -e $f || -L $f ]] && left+=("$f")
	done
	# deb-systemd-helper's memory of the enablement goes too.
	left+=($(find /var/lib/systemd/deb-systemd-helper-enabled /var/lib/systemd/deb-systemd-helper-masked -name '*rdmad*' 2>/dev/null))
	((${#left[@]} == 0)) || fail "left after the purge: ${left[*]}"
	[[ $(find /etc/rdma/rdmad.d -type f | sort) == "$admin" ]] && [[ $(xargs -r sha256sum <<<"$admin") == "$sums" ]] ||
		fail "the administrator's drop-ins changed: before [$(tr '\n' ' ' <<<"$admin")] after [$(find /etc/rdma/rdmad.d -type f | sort | tr '\n' ' ')]"
	[[ -f $other ]] || fail "the purge removed $other, another exporter's textfile"
	rm -f "$other"
	[[ -f $hand_written ]] || fail "the purge removed $hand_written, written by hand without rdmad's header"
	rm -f "$hand_written"

	# Nothing brings it back: the unit is gone for systemd, a new RDMA device
	# (udev rule) and a D-Bus call (activation file) start nothing.
	[[ $(unit_prop LoadState) == not-found && $(unit_prop ActiveState) == inactive ]] ||
		fail "rdmad.service after the purge: load $(unit_prop LoadState), active $(unit_prop ActiveState)"
	ensure_veth veth2 veth3 || fail "cannot create veth2/veth3"
	rdma link add rxe6 type rxe netdev veth2 || fail "rdma link add rxe6 failed"
	if out=$(busctl --system call org.rdmad1 /org/rdmad1 org.freedesktop.DBus.Peer Ping 2>&1); then
		fail "org.rdmad1 answered after the purge"
	fi
	sleep 2
	rdma link del rxe6
	! rdmad_running || fail "rdmad runs again after the purge: $(pgrep -ax rdmad)"
	pass "removed (stopped, config kept), purged: no process, unit not-found, no activation, textfile gone, a hand-written ${hand_written##*/} kept; $(wc -l <<<"$admin") admin drop-ins kept: $(xargs -n1 basename <<<"$admin" | tr '\n' ' ')"
}

# A fresh install on a running system (after the purge): the postinst
# enables and starts rdmad, which applies the administrator's drop-ins kept
# by the purge.
s_pkg-install() {
	local out pid
	load_packages
	rdma_dev_exists rxe0 || fail "rxe0 missing"
	set_tos rxe0 1 0 || fail "cannot set rxe0/1 tos by hand"
	out=$(dpkg -i "$pkg_dir/$pkg_prompt" </dev/null 2>&1) || fail "dpkg -i: $(tail -n 3 <<<"$out" | tr '\n' ' ')"
	[[ $(pkg_status) == "install ok installed $pkg_prompt_version" ]] || fail "after dpkg -i: $(pkg_status)"
	[[ $(unit_prop UnitFileState) == enabled ]] || fail "rdmad.service is $(unit_prop UnitFileState) after a fresh install"
	wait_for 30 bash -c '[[ $(systemctl show -p ActiveState --value rdmad.service) == active ]]' ||
		fail "rdmad.service not started by the postinst: $(unit_prop ActiveState)"
	pid=$(rdmad_pid)
	[[ $(busctl --system status org.rdmad1 2>/dev/null | sed -n 's/^PID=//p') == "$pid" ]] || fail "org.rdmad1 not owned by rdmad (pid $pid)"
	cmp -s "$conffile" <(dpkg-deb --fsys-tarfile "$pkg_dir/$pkg_prompt" | tar -xOf - ./etc/rdma/rdmad.toml) ||
		fail "$conffile is not the shipped default after a purge and a fresh install"
	wait_for 10 tos_is rxe0 "$admin_tos" || fail "rxe0/1 tos '$(tos_of rxe0)', the kept $admin_dropin declares $admin_tos"
	wait_for 5 grep -qF "rdmad_build_info{version=\"$bin_prompt_version\"," "$metrics_file" || fail "no textfile at $metrics_file from the kept $metrics_dropin"
	pass "postinst enabled and started rdmad (pid $pid); shipped rdmad.toml; kept drop-ins applied: rxe0/1 tos $admin_tos, textfile written"
}

# ---------------------------------------------------------------- driver

say() { printf '%s\n' "$*" >"$console"; }

run_all() {
	local boots names name t0 out rc took detail limit
	mkdir -p "$state_dir"
	boots=$(($(cat "$state_dir/boots" 2>/dev/null || echo 0) + 1))
	echo "$boots" >"$state_dir/boots"
	sync
	mapfile -t names < <(scenarios "$(guest_suite)" "$boots")
	say "E2E-BEGIN boot=$boots suite=$(guest_suite) kernel=$(uname -r) uptime=$(now)"
	for name in "${names[@]}"; do
		t0=$(now)
		limit=$(scenario_timeout "$name")
		out=$(timeout "$limit" "$0" scenario "$name" 2>&1)
		rc=$?
		took=$(elapsed "$t0")
		grep -a '^E2E-INFO ' <<<"$out" >"$console"
		out=$(grep -av '^E2E-INFO ' <<<"$out")
		detail=$(tail -n1 <<<"$out" | tr -c '[:print:]' ' ' | cut -c1-200)
		if ((rc == 0)); then
			say "E2E $name PASS $took $detail"
		else
			((rc == 124)) && detail="timed out after ${limit}s; $detail"
			say "E2E $name FAIL $took $detail"
			head -n 80 <<<"$out" | sed "s/^/E2E-LOG $name: /" >"$console"
			rdmad_journal | tail -n 25 | sed "s/^/E2E-LOG $name journal: /" >"$console"
			# What rdmad is doing right now (a hung child such as modprobe shows here).
			ps -o pid,stat,etime,wchan:24,args -g "$(systemctl show -p MainPID --value rdmad.service)" 2>&1 |
				sed "s/^/E2E-LOG $name ps: /" >"$console"
		fi
		echo "$name rc=$rc $took $detail" >>"$state_dir/results.boot$boots"
	done
	say "E2E-END boot=$boots uptime=$(now)"
	sync
	systemctl --no-block poweroff
}

case ${1:-} in
list)
	scenarios "${2:-}" "${3:-}" || { echo "usage: $0 list bookworm|trixie 1|2" >&2; exit 2; }
	;;
run) run_all ;;
scenario)
	fn="s_${2:-}"
	declare -F "$fn" >/dev/null || { echo "unknown scenario '${2:-}'" >&2; exit 2; }
	"$fn"
	;;
*) echo "usage: $0 list SUITE BOOT | run | scenario NAME" >&2; exit 2 ;;
esac
