#!/bin/bash
# rdmad end-to-end scenarios, run INSIDE the VM by rdmad-e2e.service.
#
#   rdmad-e2e.sh list BOOT        scenario names of boot BOOT (1 or 2); the host uses this
#   rdmad-e2e.sh run              run this boot's scenarios, report on the console, power off
#   rdmad-e2e.sh scenario NAME    run one scenario (exit 0 = pass; last line = detail)
#
# Every result goes to the serial console as one line the host parses:
#   E2E <scenario> PASS|FAIL <seconds> <detail>
# Everything asserted here is read from the kernel (configfs, /sys, /proc, rdma,
# ulimit) or from systemd/journald, never from rdmad's own word alone.
set -uo pipefail

state_dir=/var/lib/rdmad-e2e
console=${E2E_CONSOLE:-/dev/ttyS0}
cm=/sys/kernel/config/rdma_cm
declared_tos=106          # from the guest's rdmad.toml: every RoCE port
user=e2euser              # member of @rdma, created when the image is prepared

boot1=(boot rdmad-systemd sandbox-caps link-at-boot tos-hotadd modules roce-v1-error memlock-user dbus-denied hotplug)
boot2=(reboot-boot reboot-link reboot-memlock reboot-doctor)

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

# ---------------------------------------------------------------- scenarios

s_boot() {
	local st
	st=$(systemctl is-system-running 2>/dev/null)
	pass "kernel $(uname -r), boot $(cat "$state_dir/boots"), system $st"
}
s_reboot-boot() { s_boot; }

s_rdmad-systemd() {
	local en st pid ppid owner
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
	pass "active, pid $pid owns org.rdmad1, restarts $(systemctl show -p NRestarts --value rdmad.service), status: $(systemctl show -p StatusText --value rdmad.service)"
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
	pass "rxe0 on $(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0 2>/dev/null), tos $(tos_of rxe0) after $(elapsed "$t0")s of waiting"
}
s_link-at-boot() { link_declared; }
s_reboot-link() { link_declared; }

# A Soft-RoCE device created by hand after rdmad is up gets the TOS declared
# for every RoCE port within one second, with no command to rdmad.
s_tos-hotadd() {
	local t0 took
	ensure_veth veth2 veth3 || fail "cannot create veth2/veth3"
	t0=$(now)
	rdma link add rxe1 type rxe netdev veth2 || fail "rdma link add rxe1 failed"
	wait_for 5 tos_is rxe1 "$declared_tos" ||
		fail "rxe1/1 default_roce_tos is '$(tos_of rxe1)' 5s after the device appeared, declared $declared_tos"
	took=$(elapsed "$t0")
	awk -v t="$took" 'BEGIN { exit !(t <= 1.0) }' ||
		fail "rxe1/1 tos $declared_tos applied after ${took}s, limit 1s"
	pass "rxe1/1 tos $declared_tos applied ${took}s after rdma link add"
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
	out=$(in_sandbox -- sh -c "d=$cm/$dev; { [ -d \$d ] || mkdir \$d; } && echo 32 >\$d/ports/1/default_roce_tos && cat \$d/ports/1/default_roce_tos && rmdir \$d" 2>&1) ||
		fail "configfs rdma_cm mkdir/write inside rdmad's sandbox failed: $out"
	[[ $out == 32 ]] || fail "configfs tos read back '$out' inside the sandbox"
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
	pass "replica = live rdmad ($(grep -E '^Seccomp_filters' <<<"$live")); link add, configfs, netns set, /etc + /sys/devices writes, modprobe $m, reload OK; refused: /etc, /proc/sys, modprobe w/o module calls, link add w/o CAP_NET_ADMIN"
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
	if rdmactl status 2>&1 | grep -qE '^ +rxe0/1: '; then
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
	rdmad_journal | grep -F rxe9 | grep -qiE 'v1|mode' ||
		fail "journal of rdmad.service does not mention the rxe9 mode failure"
	pass "rxe9 tos $(tos_of rxe9), mode '$(mode_of rxe9)'; status: $(echo "$status" | tr -s ' ' | cut -c1-120)"
}

memlock_check() {
	local soft hard
	id -nG "$user" | tr ' ' '\n' | grep -qx rdma || fail "$user is not in group rdma"
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

# Live events: the netdev under a declared link goes away and comes back; rdmad
# recreates rxe0 and reapplies its TOS without being told.
s_hotplug() {
	local t0
	rdma_dev_exists rxe0 || fail "rxe0 missing before the test"
	ip link del veth0 || fail "ip link del veth0 failed"
	wait_for 10 bash -c '! test -e /sys/class/infiniband/rxe0' || fail "rxe0 survived the deletion of veth0"
	t0=$(now)
	ip link add veth0 type veth peer name veth1 || fail "ip link add veth0 failed"
	ip link set veth0 up; ip link set veth1 up
	wait_for 10 rdma_dev_exists rxe0 || fail "rxe0 not recreated within 10s of veth0 coming back"
	wait_for 5 tos_is rxe0 "$declared_tos" || fail "rxe0 recreated but tos is '$(tos_of rxe0)'"
	pass "rxe0 back with tos $(tos_of rxe0) $(elapsed "$t0")s after veth0 reappeared"
}

# ---------------------------------------------------------------- driver

say() { printf '%s\n' "$*" >"$console"; }

run_all() {
	local boots names name t0 out rc took detail
	mkdir -p "$state_dir"
	boots=$(($(cat "$state_dir/boots" 2>/dev/null || echo 0) + 1))
	echo "$boots" >"$state_dir/boots"
	sync
	if ((boots == 1)); then names=("${boot1[@]}"); else names=("${boot2[@]}"); fi
	say "E2E-BEGIN boot=$boots uptime=$(now)"
	for name in "${names[@]}"; do
		t0=$(now)
		out=$(timeout 120 "$0" scenario "$name" 2>&1)
		rc=$?
		took=$(elapsed "$t0")
		detail=$(tail -n1 <<<"$out" | tr -c '[:print:]' ' ' | cut -c1-200)
		if ((rc == 0)); then
			say "E2E $name PASS $took $detail"
		else
			((rc == 124)) && detail="timed out after 120s; $detail"
			say "E2E $name FAIL $took $detail"
			head -n 40 <<<"$out" | sed "s/^/E2E-LOG $name: /" >"$console"
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
	case ${2:-} in
	1) printf '%s\n' "${boot1[@]}" ;;
	2) printf '%s\n' "${boot2[@]}" ;;
	*) echo "usage: $0 list 1|2" >&2; exit 2 ;;
	esac
	;;
run) run_all ;;
scenario)
	fn="s_${2:-}"
	declare -F "$fn" >/dev/null || { echo "unknown scenario '${2:-}'" >&2; exit 2; }
	"$fn"
	;;
*) echo "usage: $0 list BOOT | run | scenario NAME" >&2; exit 2 ;;
esac
