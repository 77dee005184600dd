# Sourced by rdmad-e2e.sh: the Kubernetes DaemonSet's init step on a host
# whose system bus is dbus-broker (contrib/kubernetes).

register 1 "trixie" k8s-bus-reload

# contrib/kubernetes/rdmad-policy-sync, the DaemonSet's init step, installs
# rdmad's bus policy on the host and asks the bus to reload: an older
# dbus-broker (RHEL 9's 28, bookworm's 33) reads its policy files only
# when told to, so without the reload a fresh node would refuse rdmad its
# name. The packaged policy is taken away (the bus told), so the bus
# refuses root org.rdmad1; the script installs it into
# /etc/dbus-1/system.d and asks for the reload (ReloadConfig through
# dbus-send, as in the image): root may own the name again. Trixie's
# dbus-broker also watches its directories and may take the file without
# the reload: whether it did is an observation here (E2E-INFO); the
# refusal without the reload is tested on bookworm's dbus-broker 33 by
# contrib/kubernetes (TestInitAsksTheBusToReload).
s_k8s-bus-reload() {
	local sync=/usr/lib/rdmad-e2e/rdmad-policy-sync packaged=/usr/share/dbus-1/system.d/org.rdmad1.conf
	local kept=/var/lib/rdmad-e2e-k8s/org.rdmad1.conf installed=/etc/dbus-1/system.d/org.rdmad1.conf
	local policy=/var/lib/rdmad-e2e-k8s/50-kubernetes.toml dropin=/etc/rdma/rdmad.d/50-e2e-k8s.toml out
	[[ $(systemctl show -p Id --value dbus.service) == dbus-broker.service ]] || fail "the system bus is not dbus-broker"
	command -v dbus-send >/dev/null || fail "no dbus-send in the guest"
	[[ -x $sync ]] || fail "$sync is not in the guest"
	mkdir -p "${kept%/*}"
	cp "$packaged" "$kept" || fail "cannot keep $packaged"
	trap 'cp "$kept" "$packaged"; rm -f "$installed" "$dropin"; systemctl reload dbus.service; rdmactl reload >/dev/null 2>&1' EXIT
	printf '# the e2e test'"'"'s Kubernetes policy: nothing declared\n' >"$policy"
	# root_may_own: the bus's answer to root's RequestName of org.rdmad1 is
	# not AccessDenied (rdmad holds the name: "exists").
	root_may_own() {
		out=$(dbus-send --system --print-reply --dest=org.freedesktop.DBus /org/freedesktop/DBus \
			org.freedesktop.DBus.RequestName string:org.rdmad1 uint32:4 2>&1)
		! matches -i AccessDenied <<<"$out"
	}
	root_may_own || fail "root may not own org.rdmad1 with the packaged policy: $out"
	rm -f "$packaged"
	systemctl reload dbus.service || fail "systemctl reload dbus.service"
	wait_for 10 not root_may_own || fail "the bus still lets root own org.rdmad1 without any policy for it: $out"

	run_sync() {
		env POLICY="$policy" DROPIN="$dropin" DBUS_POLICY="$installed" DBUS_POLICY_SRC="$kept" "$@" "$sync" --once 2>&1
	}
	local watches=no
	out=$(run_sync DBUS_RELOAD=) || fail "$sync --once (no reload): $out"
	[[ -s $installed ]] || fail "$sync did not install $installed: $out"
	sleep 2
	root_may_own && watches=yes
	info "k8s-bus-reload $(dbus-broker --version 2>/dev/null | head -n 1): took $installed without a reload: $watches"
	# Away again, and the bus told, for the run that asks it.
	rm -f "$installed"
	systemctl reload dbus.service || fail "systemctl reload dbus.service"
	wait_for 10 not root_may_own || fail "the bus lets root own org.rdmad1 after its policy went again: $out"
	out=$(run_sync) || fail "$sync --once: $out"
	matches -F "asked the system bus to reload its configuration" <<<"$out" || fail "$sync did not ask the bus to reload: $out"
	wait_for 10 root_may_own || fail "after $sync the bus still refuses root org.rdmad1: $out"
	pass "dbus-broker refused org.rdmad1 without rdmad's policy; $sync installed $installed and its ReloadConfig (dbus-send) made the bus take it (it took it without a reload too: $watches)"
}
