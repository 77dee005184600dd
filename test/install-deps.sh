#!/usr/bin/env bash
# Installs what the tests need on a Debian machine, only when missing, so a
# fresh machine passes `make test` and a prepared one does not touch apt.
#   test/install-deps.sh test   make, gcc (-race), dbus-daemon, dbus-broker (not on a host booted with systemd),
#                               busctl/gdbus, systemd-analyze, iproute2, man tools,
#                               ethtool, bash-completion, zsh and fish (rdmactl's completions, run in each),
#                               packaging checks (lintian, rpm, mmdebstrap for the Debian root,
#                               rpmbuild and debhelper to build make dist's tarball),
#                               ansible-core, PyGObject and the Kubernetes API models (python3),
#                               cockpit-ws, cockpit-bridge and chromium (the Cockpit page's test),
#                               promtool, prometheus and node_exporter taken from Debian's
#                               packages into .tools/ (the rules and the fleet-view test)
set -euo pipefail

need=()
want() { # want COMMAND PACKAGE
	command -v "$1" >/dev/null 2>&1 || need+=("$2")
}
want_file() { # want_file PATH PACKAGE
	[ -e "$1" ] || need+=("$2")
}
# The examples and checks run Debian's /usr/bin/python3, not one first in PATH.
want_py() { # want_py MODULE PACKAGE
	/usr/bin/python3 -c "import $1" >/dev/null 2>&1 || need+=("$2")
}

case "${1:-test}" in
test)
	want make make
	want gcc gcc # go test -race and go build -race need cgo
	want dbus-daemon dbus-daemon
	# dbus-broker (Fedora's and RHEL's system bus), run by the bus tests
	# with a private configuration. Debian's package makes it the system bus
	# at the next boot, so it is installed only where no systemd booted
	# (containers, CI); elsewhere the dbus-broker tests are skipped until
	# it is installed by hand.
	[ -d /run/systemd/system ] || want dbus-broker-launch dbus-broker
	want dbus-send dbus-bin
	want busctl systemd
	want systemd-stdio-bridge systemd # rdmactl -H: the fake ssh runs the real bridge
	[ -f /usr/share/bash-completion/bash_completion ] || need+=(bash-completion) # rdmactl's completion, run in bash
	want zsh zsh   # ... and in zsh
	want fish fish # ... and in fish
	want systemd-analyze systemd
	want gdbus libglib2.0-bin
	want ip iproute2
	want groff groff-base
	want man man-db
	want strace strace # units: the syscalls rdmad makes must be in its unit's filter
	want ethtool ethtool # daemon/ethtool: a notification of the real monitor group (ethtool -K on a veth)
	want lintian lintian
	want rpm rpm
	want rpmbuild rpm # make dist's tarball built with packaging/rpm/rdmad.spec
	want dh debhelper # ... and with debian/ (plain dh): dpkg-buildpackage
	want dpkg-buildpackage dpkg-dev
	want dpkg-deb dpkg
	want mmdebstrap mmdebstrap
	want unshare util-linux
	want ansible-playbook ansible-core
	[ -x /usr/bin/python3 ] || need+=(python3)
	want_py gi python3-gi
	want_py yaml python3-yaml
	want_py kubernetes python3-kubernetes
	# The Cockpit page's browser test (test/web): cockpit-ws with a local
	# session bridge, and headless Chromium driven over DevTools (chromedp).
	want_file /usr/lib/cockpit/cockpit-ws cockpit-ws
	want_file /usr/bin/cockpit-bridge cockpit-bridge
	want chromium chromium
	;;
*)
	echo "usage: $0 test" >&2
	exit 2
	;;
esac

# promtool (`promtool check metrics` on rdmad's textfile, `promtool check
# rules` and `promtool test rules` on contrib/prometheus), and the prometheus
# and node_exporter servers the fleet-view test runs on loopback: Debian
# ships them in the prometheus and prometheus-node-exporter packages, which
# would also install and start the services. Only the static binaries are
# taken from those packages, into .tools/ (gitignored), where the tests
# look for them.
install_tool() { # install_tool NAME PACKAGE PATH-IN-PACKAGE
	local name=$1 pkg=$2 member=$3 repo tmp
	repo=$(cd "$(dirname "$0")/.." && pwd)
	[ -x "$repo/.tools/$name" ] && return 0
	tmp=$(mktemp -d)
	# A RETURN trap would stay set after this function and fire again, with
	# $tmp out of scope, when its caller returns: clean up by hand instead.
	if ! (cd "$tmp" && apt-get download -qq "$pkg" >/dev/null 2>&1); then
		[ "$(id -u)" -eq 0 ] && apt-get update -qq
		(cd "$tmp" && apt-get download -qq "$pkg" >/dev/null)
	fi
	mkdir -p "$repo/.tools"
	dpkg-deb --fsys-tarfile "$tmp"/"$pkg"_*.deb | tar -xOf - "$member" >"$tmp/$name"
	install -m 0755 "$tmp/$name" "$repo/.tools/$name"
	rm -rf "$tmp"
	echo "install-deps: $name from Debian's $pkg package in .tools/$name" >&2
}

# A binary already in PATH (the packages installed by hand) is used as it is.
install_prometheus_tools() {
	command -v promtool >/dev/null 2>&1 || install_tool promtool prometheus ./usr/bin/promtool
	command -v prometheus >/dev/null 2>&1 || install_tool prometheus prometheus ./usr/bin/prometheus
	command -v prometheus-node-exporter >/dev/null 2>&1 ||
		install_tool prometheus-node-exporter prometheus-node-exporter ./usr/bin/prometheus-node-exporter
}

# dbus-daemon alone is in dbus-daemon on bookworm; older releases call it dbus.
if [ ${#need[@]} -gt 0 ]; then
	mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
	echo "install-deps: installing ${need[*]}" >&2
	if [ "$(id -u)" -ne 0 ]; then
		echo "install-deps: need root to apt-get install ${need[*]}" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

[ "${1:-test}" = test ] && install_prometheus_tools
exit 0
