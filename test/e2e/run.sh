#!/bin/bash
# rdmad real-kernel end-to-end test (`make e2e`, `make e2e SUITE=bookworm|trixie`).
#
# For each suite (Debian bookworm, kernel 6.1; Debian trixie, kernel 6.12 with
# an out-of-tree Soft-iWARP module) it builds (or reuses) a cached rootfs,
# installs the .deb of `make package` into a copy of it with dpkg -i (plus two
# upgrade packages the guest installs later), adds the scenarios of test/e2e/guest,
# makes an ext4 disk without mounting anything (mke2fs -d), boots it twice
# under qemu (TCG, no network) and reads the scenario results the guest
# prints on its serial console. See docs/e2e.md.
#
# Usage: run.sh [SUITE...]           default: bookworm trixie
#        run.sh report WORKDIR [SUITE...]   the table again from a finished run
#
# Environment:
#   E2E_WORKDIR        where each suite's rootfs, disk, kernel and serial logs go,
#                      one directory per suite (default /var/tmp/rdmad-e2e/run)
#   E2E_CACHE          rootfs tarball cache (default /var/cache/rdmad-e2e)
#   E2E_BOOT_TIMEOUT   hard limit per boot in seconds (default 600)
#   E2E_MEMORY         guest memory in MiB (default 1024)
#   E2E_PARALLEL       1: boot the suites' VMs at the same time (default 0)
#   E2E_ONLY           scenario names (space-separated): run only these, for
#                      diagnosis; a boot with none of them is skipped
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
e2e=$repo/test/e2e
work=${E2E_WORKDIR:-/var/tmp/rdmad-e2e/run}
boot_timeout=${E2E_BOOT_TIMEOUT:-600}
memory=${E2E_MEMORY:-1024}
parallel=${E2E_PARALLEL:-0}
all_suites=(bookworm trixie)
guest_user=e2euser

t_start=$SECONDS
step() { # step NAME CMD...: run CMD, record its duration in $work/timings
	local name=$1 t0=$SECONDS
	shift
	echo "e2e: == $name" >&2
	"$@"
	echo "$name $((SECONDS - t0))s" >>"$work/timings"
}
die() { echo "e2e: FAIL: $*" >&2; exit 1; }

check_suites() {
	local s
	for s; do
		[[ " ${all_suites[*]} " == *" $s "* ]] || { echo "e2e: unknown suite '$s' (${all_suites[*]})" >&2; exit 2; }
	done
}

# ------------------------------------------------------------ dependencies

install_deps() {
	local -A want=([qemu-system-x86_64]=qemu-system-x86 [mmdebstrap]=mmdebstrap
		[mke2fs]=e2fsprogs [systemctl]=systemd [timeout]=coreutils [dpkg-deb]=dpkg [unshare]=util-linux)
	local cmd pkgs=()
	for cmd in "${!want[@]}"; do
		command -v "$cmd" >/dev/null 2>&1 || pkgs+=("${want[$cmd]}")
	done
	((${#pkgs[@]})) || return 0
	((EUID == 0)) || die "missing ${pkgs[*]} and not root to install them"
	echo "e2e: installing ${pkgs[*]}" >&2
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
}

# ------------------------------------------------------------ guest image

# ------------------------------------------------------------ packages

# build_packages: the .debs the guests get, in $work/packages. The product is
# what `make package` writes for this tree. Two upgrades of it are built from
# a copy of the tree with a higher version and a different shipped
# /etc/rdma/rdmad.toml (one comment line more each), so dpkg has a conffile
# question to ask about the administrator's edit: `fleet` (installed with
# --force-confold) and then `prompt` (a plain dpkg -i). packages.env tells the
# guest their file names and versions.
build_packages() {
	local pkg=$work/packages deb version binary n name src
	rm -rf "$pkg"
	mkdir -p "$pkg/src"
	make -C "$repo" --no-print-directory package DIST="$pkg/base" >"$pkg/build.log" 2>&1 ||
		{ tail -n 30 "$pkg/build.log" >&2; die "make package failed (log: $pkg/build.log)"; }
	rm -rf "$pkg/base/stage"
	deb=$(ls "$pkg"/base/rdmad_*.deb)
	version=$(dpkg-deb -f "$deb" Version)
	binary=$("$pkg/base/bin/rdmad" --version | awk '{print $2}')
	cp "$deb" "$pkg/"
	printf 'pkg_install=%q\npkg_install_version=%q\nbin_install_version=%q\n' "${deb##*/}" "$version" "$binary" >"$pkg/packages.env"

	# The tree as `make package` saw it (committed or not), without git.
	tar -C "$repo" --exclude=./.git --exclude=./.tools --exclude=./dist --exclude=./bin -cf - . | tar -C "$pkg/src" -xf -
	src=$pkg/src
	n=1
	for name in fleet prompt; do
		n=$((n + 1))
		printf '\n# Shipped default of e2e upgrade package %d (test/e2e/run.sh): changed so that\n# dpkg asks what to do about the administrator'"'"'s edit.\n' "$n" >>"$src/etc/rdma/rdmad.toml"
		make -C "$src" --no-print-directory package DIST="$pkg/$name" TOOLS="$repo/.tools" \
			VERSION="$binary-e2e-upgrade$n" PKG_VERSION="$version+e2e.upgrade$n" \
			SOURCE_DATE_EPOCH="$(git -C "$repo" log -1 --format=%ct 2>/dev/null || date +%s)" >>"$pkg/build.log" 2>&1 ||
			{ tail -n 30 "$pkg/build.log" >&2; die "make package of upgrade $n failed (log: $pkg/build.log)"; }
		rm -rf "$pkg/$name/stage"
		deb=$(ls "$pkg/$name"/rdmad_*.deb)
		cp "$deb" "$pkg/"
		printf 'pkg_%s=%q\npkg_%s_version=%q\nbin_%s_version=%q\n' "$name" "${deb##*/}" \
			"$name" "$(dpkg-deb -f "$deb" Version)" "$name" "$binary-e2e-upgrade$n" >>"$pkg/packages.env"
	done
	rm -rf "$src"
	# The sandbox scenario's probe: rdmad's ethtool calls, run under the
	# unit's sandbox (test/e2e/ethtoolprobe; not part of the package).
	(cd "$repo" && CGO_ENABLED=0 go build -trimpath -o "$pkg/ethtool-probe" ./test/e2e/ethtoolprobe) >>"$pkg/build.log" 2>&1 ||
		{ tail -n 30 "$pkg/build.log" >&2; die "go build of the ethtool probe failed (log: $pkg/build.log)"; }
}

# in_root ROOT CMD...: run CMD chrooted into ROOT with /proc and /dev mounted,
# as image builders (mmdebstrap, debootstrap) run maintainer scripts; the
# mounts live in a private mount namespace and vanish with it. No systemd
# runs in ROOT.
in_root() {
	local root=$1
	shift
	unshare --mount --fork --propagation private -- sh -c \
		'mount -t proc proc "$1/proc" && mount --rbind /dev "$1/dev" && root=$1 && shift && exec chroot "$root" "$@"' \
		sh "$root" "$@"
}

# install_product ROOT: put rdmad into the guest tree the way a Debian host
# gets it: `dpkg -i` of the .deb `make package` built, in the image (as an
# image build or the installer does), so the maintainer scripts run for real
# (sysusers, tmpfiles, enable; the start waits for the first boot). The
# guest keeps the packages for the upgrade, purge and reinstall scenarios.
install_product() {
	local root=$1 log=$1/../install.log dir=/var/lib/rdmad-e2e/packages status
	install -d "$root$dir"
	cp "$work"/packages/*.deb "$work/packages/packages.env" "$root$dir/"
	(. "$work/packages/packages.env" && in_root "$root" dpkg -i "$dir/$pkg_install") >"$log" 2>&1 ||
		{ tail -n 30 "$log" >&2; die "dpkg -i of the package in $root failed (log: $log)"; }
	status=$(chroot "$root" dpkg-query -W -f '${Status}' rdmad)
	[[ $status == "install ok installed" ]] || die "rdmad's dpkg status in $root after dpkg -i: $status"
}

# install_test_side ROOT SUITE: the scenarios, their unit, the test policy and
# the netdevs systemd-networkd makes at boot; what rdma-core would otherwise
# do in rdmad's place is masked.
install_test_side() {
	local root=$1 suite=$2 unit f
	install -D -m 0755 "$e2e/guest/rdmad-e2e.sh" "$root/usr/lib/rdmad-e2e/rdmad-e2e.sh"
	if [[ -n ${E2E_ONLY:-} ]]; then
		echo "$E2E_ONLY" >"$root/usr/lib/rdmad-e2e/only"
	fi
	install -D -m 0755 "$work/packages/ethtool-probe" "$root/usr/lib/rdmad-e2e/ethtool-probe"
	# Scenarios kept in files of their own (rdmad-e2e.sh sources them).
	for f in "$e2e"/guest/scenarios/*.sh; do
		[[ -e $f ]] && install -D -m 0644 "$f" "$root/usr/lib/rdmad-e2e/scenarios/${f##*/}"
	done
	# The DaemonSet's init step, run by the k8s-bus-reload scenario as the
	# init container runs it.
	install -D -m 0755 "$repo/contrib/kubernetes/rdmad-policy-sync" "$root/usr/lib/rdmad-e2e/rdmad-policy-sync"
	# The Slurm scenario starts slurmctld and slurmd itself once it has
	# written slurm.conf (without one they fail at boot); slurmd runs the
	# package's /usr/libexec/rdmad/rdmad-healthcheck.
	for unit in slurmd.service slurmctld.service; do
		[[ -e $root/usr/lib/systemd/system/$unit || -e $root/lib/systemd/system/$unit ]] &&
			systemctl --root="$root" --quiet disable "$unit"
	done
	install -D -m 0644 "$e2e/guest/rdmad-e2e.service" "$root/etc/systemd/system/rdmad-e2e.service"
	install -D -m 0644 "$e2e/guest/rdmad.toml" "$root/etc/rdma/rdmad.toml"
	install -D -m 0644 "$e2e/guest/10-e2e-veth0.netdev" "$root/etc/systemd/network/10-e2e-veth0.netdev"
	install -D -m 0644 "$e2e/guest/10-e2e-veth.network" "$root/etc/systemd/network/10-e2e-veth.network"
	# Suite-only parts: Soft-iWARP exists only in the trixie guest.
	if [[ -d $e2e/guest/$suite ]]; then
		for f in "$e2e/guest/$suite"/*; do
			case $f in
			*.toml) install -D -m 0644 "$f" "$root/etc/rdma/rdmad.d/${f##*/}" ;;
			*.netdev) install -D -m 0644 "$f" "$root/etc/systemd/network/${f##*/}" ;;
			*) die "no place for $f in the guest" ;;
			esac
		done
	fi

	# Debian ships roce.conf and iwarp.conf without active modules; declare
	# one in each so loading by transport is proven (nvme_rdma: NVMe over
	# fabrics, which runs over iWARP; nothing else in the guest loads it).
	add_module "$root/etc/rdma/modules/roce.conf" ib_umad
	add_module "$root/etc/rdma/modules/iwarp.conf" nvme_rdma

	# The playbook of contrib/ansible, run in the guest (bookworm has
	# ansible-core); node_exporter's textfile directory, as
	# prometheus-node-exporter creates it, for the [metrics] scenario.
	mkdir -p "$root/usr/lib/rdmad-e2e/ansible"
	cp -r "$repo/contrib/ansible/site.yml" "$repo/contrib/ansible/roles" "$root/usr/lib/rdmad-e2e/ansible/"
	install -d -m 0755 "$root/var/lib/prometheus/node-exporter"

	# The trixie guest's system bus is dbus-broker (RHEL 9 and Fedora run it),
	# the bookworm guest's dbus-daemon: rdmad's policy, activation and polkit
	# checks run on both (scenario bus-broker).
	if [[ $suite == trixie ]]; then
		systemctl --root="$root" --quiet enable dbus-broker.service
	fi

	# rdmad.service is enabled by the package's postinst, not here.
	systemctl --root="$root" --quiet enable rdmad-e2e.service systemd-networkd.service
	# The serial getty would hang up the console the results come back on;
	# rdma-core's own module loader must not do rdmad's job in the test.
	for unit in serial-getty@ttyS0.service \
		rdma-load-modules@rdma.service rdma-load-modules@roce.service \
		rdma-load-modules@infiniband.service rdma-load-modules@iwarp.service \
		rdma-load-modules@opa.service; do
		ln -sfn /dev/null "$root/etc/systemd/system/$unit"
	done

	chroot "$root" useradd --create-home --groups rdma --shell /bin/bash "$guest_user"
}

add_module() { # add_module FILE MODULE: unless FILE already lists a module
	grep -qE '^[[:space:]]*[a-z]' "$1" 2>/dev/null && return 0
	printf '# added by the rdmad e2e test\n%s\n' "$2" >>"$1"
}

prepare_rootfs() { # prepare_rootfs SUITE
	local suite=$1 dir=$work/$1 root=$work/$1/rootfs
	rm -rf "$root" "$dir"/disk.img "$dir"/serial.boot*.log "$dir"/boot*.timedout
	mkdir -p "$root"
	tar -C "$root" --numeric-owner --xattrs --xattrs-include='*' -xpf "${tarball[$suite]}"
	install_product "$root"
	install_test_side "$root" "$suite"
	cp "$(ls "$root"/boot/vmlinuz-* | sort -V | tail -n1)" "$dir/vmlinuz"
	cp "$(ls "$root"/boot/initrd.img-* | sort -V | tail -n1)" "$dir/initrd.img"
}

make_disk() { # make_disk SUITE
	mke2fs -q -F -t ext4 -L rdmad-e2e -d "$work/$1/rootfs" "$work/$1/disk.img" 3G >/dev/null
}

# ------------------------------------------------------------ boot and parse

# boot SUITE N: boot the suite's disk once; the guest runs boot N's scenarios
# and powers off.
boot() {
	local suite=$1 n=$2 dir=$work/$1 rc=0
	timeout --kill-after=10 "$boot_timeout" qemu-system-x86_64 \
		-accel tcg -m "$memory" -smp 2 -nographic -no-reboot -nic none \
		-kernel "$dir/vmlinuz" -initrd "$dir/initrd.img" \
		-drive "file=$dir/disk.img,if=virtio,format=raw" \
		-append "root=/dev/vda rw console=ttyS0 loglevel=4 panic=-1 systemd.show_status=error systemd.journald.forward_to_console=0 trace_event=module:module_load trace_clock=mono" \
		</dev/null >"$dir/serial.boot$n.log" 2>&1 || rc=$?
	if ((rc == 124 || rc == 137)); then
		echo "e2e: $suite boot $n did not power off within ${boot_timeout}s" >&2
		: >"$dir/boot$n.timedout"
		return 1
	elif ((rc != 0)); then
		echo "e2e: $suite: qemu exited $rc on boot $n" >&2
	fi
}

# boot_suite SUITE: both boots; the second only if the first finished.
boot_suite() {
	local suite=$1
	step "$suite:boot1" boot "$suite" 1 || { echo "e2e: $suite: skipping the reboot: boot 1 did not finish" >&2; return 0; }
	if [[ -z $(bash "$e2e/guest/rdmad-e2e.sh" list "$suite" 2) ]]; then
		echo "e2e: $suite: no scenario of boot 2 among E2E_ONLY; not rebooting" >&2
		return 0
	fi
	step "$suite:boot2" boot "$suite" 2 || true
}

results=()
failed=0

# kernel_of LOG: the guest's uname -r from its E2E-BEGIN line.
kernel_of() { { grep -aoE 'E2E-BEGIN boot=[0-9]+ suite=[a-z]+ kernel=[^ ]+' <<<"$1" || true; } | head -n1 | sed 's/.*kernel=//'; }

collect() { # collect SUITE N: one row per expected scenario of boot N
	local suite=$1 n=$2 dir=$work/$1 log=$work/$1/serial.boot$2.log name line verdict secs detail kernel
	local clean
	[[ -n $(bash "$e2e/guest/rdmad-e2e.sh" list "$suite" "$n") ]] || return 0 # none of E2E_ONLY
	clean=$( { tr '\r' '\n' <"$log"; } 2>/dev/null || true)
	kernel=$(kernel_of "$clean")
	if ! grep -qa "E2E-BEGIN boot=$n" <<<"$clean"; then
		echo "e2e: $suite boot $n never reached the scenarios; serial log tail ($log):" >&2
		tail -n 60 <<<"$clean" | sed 's/^/    | /' >&2
		failed=1
	fi
	while read -r name; do
		line=$(grep -aoE "E2E $name (PASS|FAIL) .*" <<<"$clean" | tail -n1 || true)
		if [[ -z $line ]]; then
			verdict=MISSING secs=- detail="no result on the console"
			[[ ! -e $dir/boot$n.timedout ]] || detail+=" (boot timed out)"
		else
			read -r _ _ verdict secs detail <<<"$line"
		fi
		[[ $verdict == PASS ]] || failed=1
		results+=("$(printf '%-8s %-22s %-4s %-16s %-8s %7s  %s' "$suite" "${kernel:--}" "$n" "$name" "$verdict" "$secs" "$detail")")
	done < <(bash "$e2e/guest/rdmad-e2e.sh" list "$suite" "$n")
	if grep -qa "E2E-LOG" <<<"$clean"; then
		echo "e2e: guest diagnostics of $suite boot $n:" >&2
		grep -a "E2E-LOG" <<<"$clean" | sed 's/^.*E2E-LOG /    | /' >&2
	fi
}

main() {
	local suites=("$@") s
	((${#suites[@]})) || suites=("${all_suites[@]}")
	check_suites "${suites[@]}"
	# One run per work directory: a second `make e2e` would delete the disk
	# under the first one's qemu.
	mkdir -p "$work"
	exec 9>"$work.lock"
	flock -n 9 || die "another e2e run is using $work (set E2E_WORKDIR)"
	printf '%s\n' "${suites[@]}" >"$work/suites"
	: >"$work/timings"
	step deps install_deps
	declare -gA tarball=()
	for s in "${suites[@]}"; do
		step "$s:image" eval 'tarball[$s]=$("$e2e/image.sh" "$s")'
		echo "e2e: $s rootfs ${tarball[$s]}" >&2
	done
	step packages build_packages
	for s in "${suites[@]}"; do
		step "$s:install" prepare_rootfs "$s"
		step "$s:disk" make_disk "$s"
	done
	if ((parallel)); then
		for s in "${suites[@]}"; do boot_suite "$s" & done
		wait
	else
		for s in "${suites[@]}"; do boot_suite "$s"; done
	fi
	report "${suites[@]}"
}

# policy_window_table SUITE...: the policy-window scenario's measurements
# (E2E-INFO policy-window key=value ...) as one row per suite and boot.
policy_window_table() {
	local s n rows=()
	for s; do
		for n in 1 2; do
			[[ -f $work/$s/serial.boot$n.log ]] || continue
			mapfile -t -O "${#rows[@]}" rows < <(tr '\r' '\n' <"$work/$s/serial.boot$n.log" | grep -a '^E2E-INFO policy-window ' | sed "s/^E2E-INFO policy-window /$s $n /")
		done
	done
	((${#rows[@]})) || return 0
	echo
	echo "policy in force after a device's arrival, seconds from the return of \`rdma link add\` to the declared TOS in configfs (guest clock; targets: first device of a boot < 0.6, hot-adds p95 < 0.3; rdma_cm: configfs rdma_cm there when the first device came; preload: how long the restarted rdmad took to load rdma_cm ahead of the devices):"
	printf '%-8s %-22s %-4s %7s %-7s %8s %3s %7s %7s %7s\n' suite kernel boot first rdma_cm preload n p50 p95 max
	printf '%s\n' "${rows[@]}" | awk '{
		delete v
		for (i = 3; i <= NF; i++) { k = $i; sub(/=.*/, "", k); x = $i; sub(/^[^=]*=/, "", x); v[k] = x }
		printf "%-8s %-22s %-4s %7s %-7s %8s %3s %7s %7s %7s\n", $1, v["kernel"], $2, v["first"], v["rdma_cm_at_first"], v["preload"], v["n"], v["p50"], v["p95"], v["max"]
	}'
}

# report [SUITE...]: the table of every expected scenario from the serial logs
# in $work; exits non-zero if a guest did not boot, a scenario is missing or
# failed. Without suites: those of the run ($work/suites).
report() {
	local suites=("$@") s n
	if ((${#suites[@]} == 0)) && [[ -s $work/suites ]]; then mapfile -t suites <"$work/suites"; fi
	((${#suites[@]})) || suites=("${all_suites[@]}")
	check_suites "${suites[@]}"
	for s in "${suites[@]}"; do
		collect "$s" 1
		collect "$s" 2
	done

	echo
	printf '%-8s %-22s %-4s %-16s %-8s %7s  %s\n' suite kernel boot scenario result seconds detail
	printf '%s\n' "${results[@]}"
	for s in "${suites[@]}"; do
		for n in 1 2; do
			[[ -f $work/$s/serial.boot$n.log ]] || continue
			if tr '\r' '\n' <"$work/$s/serial.boot$n.log" | grep -aq '^E2E-INFO '; then
				echo
				echo "$s boot $n observations:"
				tr '\r' '\n' <"$work/$s/serial.boot$n.log" | grep -a '^E2E-INFO ' | sed 's/^E2E-INFO /  /'
			fi
		done
	done
	policy_window_table "${suites[@]}"
	echo
	[[ -s $work/timings ]] && echo "timings: $(paste -sd ' ' "$work/timings"); total $((SECONDS - t_start))s"
	echo "serial logs: $work/<suite>/serial.boot{1,2}.log; disks: $work/<suite>/disk.img"
	if ((failed)); then
		echo "e2e: FAILED" >&2
		for s in "${suites[@]}"; do
			for n in 1 2; do
				[[ -f $work/$s/serial.boot$n.log ]] || continue
				echo "e2e: serial log tail, $s boot $n:" >&2
				tr '\r' '\n' <"$work/$s/serial.boot$n.log" | grep -av 'E2E-LOG' | tail -n 25 | sed 's/^/    | /' >&2
			done
		done
		exit 1
	fi
	echo "e2e: PASSED"
}

case ${1:-} in
report) # report WORKDIR [SUITE...]: re-read the serial logs of a finished run
	work=${2:?usage: run.sh report WORKDIR [SUITE...]}
	shift 2
	report "$@"
	;;
-*) echo "usage: $0 [SUITE...] | report WORKDIR [SUITE...]" >&2; exit 2 ;;
*) main "$@" ;;
esac
