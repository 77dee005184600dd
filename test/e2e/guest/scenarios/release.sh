# Sourced by rdmad-e2e.sh: what a release promises about the system bus and
# rdmad's view of /proc (docs/support.md, docs/decisions/sandbox.md).

register 1 "bookworm trixie" sandbox-proc
register 1 "trixie" bus-broker

# The trixie guest's system bus is dbus-broker (test/e2e/run.sh enables it),
# as on RHEL 9 and Fedora: rdmad holds org.rdmad1 on it, the policy file keeps
# the name root's, D-Bus activation goes through rdmad.service, and polkit
# refuses an unprivileged change while root's goes through.
s_bus-broker() {
	local bus pid comm out rc before
	bus=$(systemctl show -p Id --value dbus.service)
	[[ $bus == dbus-broker.service ]] || fail "dbus.service is $bus, not dbus-broker.service"
	# The bus driver has no peer process of its own to ask for: the unit's.
	pid=$(systemctl show -p MainPID --value dbus.service)
	comm=$(cat "/proc/$pid/comm" 2>/dev/null)
	[[ $comm == dbus-broker* ]] || fail "dbus.service runs pid $pid ($comm), not dbus-broker"
	[[ $(busctl --system status org.rdmad1 2>/dev/null | sed -n 's/^PID=//p') == "$(rdmad_pid)" ]] ||
		fail "org.rdmad1 is not owned by rdmad.service (pid $(rdmad_pid))"

	# Policy: only root may own the name.
	out=$(runuser -u "$user" -- dbus-send --system --print-reply --dest=org.freedesktop.DBus /org/freedesktop/DBus \
		org.freedesktop.DBus.RequestName string:org.rdmad1 uint32:4 2>&1) &&
		fail "$user could ask for org.rdmad1: $out"
	matches -i 'AccessDenied' <<<"$out" || fail "$user's RequestName of org.rdmad1 failed, but not for the policy: $out"

	# Activation: a call to the name starts rdmad.service, not a bare rdmad.
	systemctl stop rdmad.service || fail "cannot stop rdmad.service"
	busctl --system call org.rdmad1 /org/rdmad1 org.freedesktop.DBus.Peer Ping >/dev/null 2>&1 ||
		fail "a call to org.rdmad1 did not activate rdmad"
	wait_for 20 bash -c '[[ $(systemctl show -p ActiveState --value rdmad.service) == active ]]' ||
		fail "rdmad.service is $(unit_prop ActiveState) after activation"
	pid=$(rdmad_pid)
	[[ $(busctl --system status org.rdmad1 2>/dev/null | sed -n 's/^PID=//p') == "$pid" ]] ||
		fail "the activated org.rdmad1 is not rdmad.service's pid $pid"

	# polkit through the broker: refused for a user, allowed for root. A
	# runtime TOS left behind would break the scenarios after this one.
	trap 'rdmactl roce unset rxe0/1 >/dev/null 2>&1' EXIT
	before=$(tos_of rxe0)
	out=$(runuser -u "$user" -- rdmactl roce set rxe0/1 --tos 8 2>&1)
	rc=$?
	((rc != 0)) && matches -iE 'denied|not authori[sz]ed' <<<"$out" || fail "$user's rdmactl roce set: exit $rc: $out"
	[[ $(tos_of rxe0) == "$before" ]] || fail "a refused call changed rxe0"
	out=$(rdmactl roce set rxe0/1 --tos "$declared_tos" 2>&1) || fail "root's rdmactl roce set failed: $out"
	out=$(rdmactl roce unset rxe0/1 2>&1) || fail "rdmactl roce unset rxe0/1 (the files decide again) failed: $out"
	pass "bus dbus-broker ($(systemctl show -p MainPID --value dbus.service)); $user may not own org.rdmad1; activation started rdmad.service (pid $pid); polkit refused $user (exit $rc), root ok"
}

# ProtectProc=invisible mounts rdmad's /proc with hidepid=invisible, and
# systemd gives no gid=: the kernel exempts group 0, so root:root rdmad
# still sees every process. Doctor's lldpad check relies on it: it reads
# /proc/<pid>/comm of the pid in /run/lldpad.pid. A process named lldpad,
# run as nobody (so neither uid nor a capability lets rdmad see it), must be
# found by the running rdmad's doctor; the same sandbox under another group
# must not see it, which proves the hidepid mount is what is tested.
s_sandbox-proc() {
	# Not under /run: initramfs-tools mounts it noexec, and systemd keeps it.
	local dir=/var/lib/rdmad-e2e-lldpad pid out finding
	trap 'kill "$pid" 2>/dev/null; rm -rf "$dir" /run/lldpad.pid' EXIT
	# nobody must reach it whatever the runner's umask.
	install -d -m 0755 "$dir" && install -m 0755 /usr/bin/sleep "$dir/lldpad" || fail "cannot make the lldpad stand-in"
	setpriv --reuid=65534 --regid=65534 --clear-groups "$dir/lldpad" 300 &
	pid=$!
	wait_for 10 bash -c "[[ \$(cat /proc/$pid/comm 2>/dev/null) == lldpad ]]" || fail "the stand-in does not run as lldpad"
	[[ $(stat -c %u "/proc/$pid") == 65534 ]] || fail "the stand-in is not nobody's"
	# As lldpad writes it: "%u\n" in a zeroed 32-byte buffer.
	printf '%s\n' "$pid" | dd of=/run/lldpad.pid bs=32 count=1 conv=sync status=none || fail "cannot write /run/lldpad.pid"

	[[ $(systemctl show -p ProtectProc --value rdmad.service) == invisible ]] || fail "rdmad.service does not have ProtectProc=invisible"
	in_sandbox -- test -e "/proc/$pid" || fail "root:root under rdmad's sandbox does not see pid $pid"
	if in_sandbox Group=65534 -- test -e "/proc/$pid" 2>/dev/null; then
		fail "the sandbox under group nogroup sees pid $pid: /proc is not mounted hidepid=invisible"
	fi

	out=$(rdmactl -o json doctor 2>&1)
	finding=$(jq -r '.[] | select(.id == "coexist-lldpad") | .finding' <<<"$out" 2>/dev/null)
	[[ $finding == *"pid $pid in /run/lldpad.pid"* ]] ||
		fail "rdmad's doctor under the unit does not see lldpad (pid $pid): coexist-lldpad finding '${finding:-none}'"
	pass "rdmad (root:root, ProtectProc=invisible) sees nobody's lldpad pid $pid: ${finding:0:100}; group nogroup under the same sandbox does not"
}
