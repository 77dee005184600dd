#!/bin/bash
# rdmad real-kernel end-to-end test (`make e2e`).
#
# Builds (or reuses) a cached Debian bookworm rootfs, installs this tree into a
# copy of it with `make install DESTDIR=...`, adds the scenarios of
# test/e2e/guest, makes an ext4 disk without mounting anything (mke2fs -d),
# boots it twice under qemu (TCG, no network) and reads the scenario results
# the guest prints on its serial console. See docs/e2e.md.
#
# Environment:
#   E2E_WORKDIR        where the run's rootfs, disk, kernel and serial logs go
#                      (default /var/tmp/rdmad-e2e/run; kept for debugging)
#   E2E_CACHE          rootfs tarball cache (default /var/cache/rdmad-e2e)
#   E2E_BOOT_TIMEOUT   hard limit per boot in seconds (default 420)
#   E2E_MEMORY         guest memory in MiB (default 1024)
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
e2e=$repo/test/e2e
work=${E2E_WORKDIR:-/var/tmp/rdmad-e2e/run}
boot_timeout=${E2E_BOOT_TIMEOUT:-420}
memory=${E2E_MEMORY:-1024}
guest_user=e2euser

t_start=$SECONDS
timings=()
step() { # step NAME CMD...: run CMD, record its duration
	local name=$1 t0=$SECONDS
	shift
	echo "e2e: == $name" >&2
	"$@"
	timings+=("$name $((SECONDS - t0))s")
}
die() { echo "e2e: FAIL: $*" >&2; exit 1; }

# ------------------------------------------------------------ dependencies

install_deps() {
	local -A want=([qemu-system-x86_64]=qemu-system-x86 [mmdebstrap]=mmdebstrap
		[mke2fs]=e2fsprogs [systemctl]=systemd [timeout]=coreutils)
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

prepare_rootfs() {
	local root=$work/rootfs unit
	rm -rf "$work"
	mkdir -p "$root"
	tar -C "$root" --numeric-owner --xattrs --xattrs-include='*' -xpf "$tarball"

	# The product, exactly as a package would lay it out; static so the guest
	# does not depend on this machine's libc.
	CGO_ENABLED=0 make -C "$repo" --no-print-directory install DESTDIR="$root" PREFIX=/usr >"$work/install.log" 2>&1 ||
		{ tail -n 30 "$work/install.log" >&2; die "make install DESTDIR=$root failed (log: $work/install.log)"; }

	install -D -m 0755 "$e2e/guest/rdmad-e2e.sh" "$root/usr/lib/rdmad-e2e/rdmad-e2e.sh"
	install -D -m 0644 "$e2e/guest/rdmad-e2e.service" "$root/etc/systemd/system/rdmad-e2e.service"
	install -D -m 0644 "$e2e/guest/rdmad.toml" "$root/etc/rdma/rdmad.toml"
	install -D -m 0644 "$e2e/guest/10-e2e-veth0.netdev" "$root/etc/systemd/network/10-e2e-veth0.netdev"
	install -D -m 0644 "$e2e/guest/10-e2e-veth.network" "$root/etc/systemd/network/10-e2e-veth.network"

	# roce.conf ships without active modules in Debian; declare one so the
	# RoCE transport file is proven to be loaded too.
	if ! grep -qE '^[[:space:]]*[a-z]' "$root/etc/rdma/modules/roce.conf" 2>/dev/null; then
		printf '# added by the rdmad e2e test\nib_umad\n' >>"$root/etc/rdma/modules/roce.conf"
	fi

	systemctl --root="$root" --quiet enable rdmad.service rdmad-e2e.service systemd-networkd.service
	# The serial getty would hang up the console the results come back on;
	# rdma-core's own module loader must not do rdmad's job in the test.
	for unit in serial-getty@ttyS0.service \
		rdma-load-modules@rdma.service rdma-load-modules@roce.service \
		rdma-load-modules@infiniband.service rdma-load-modules@iwarp.service \
		rdma-load-modules@opa.service; do
		ln -sfn /dev/null "$root/etc/systemd/system/$unit"
	done

	chroot "$root" useradd --create-home --groups rdma --shell /bin/bash "$guest_user"

	cp "$(ls "$root"/boot/vmlinuz-* | sort -V | tail -n1)" "$work/vmlinuz"
	cp "$(ls "$root"/boot/initrd.img-* | sort -V | tail -n1)" "$work/initrd.img"
}

make_disk() {
	mke2fs -q -F -t ext4 -L rdmad-e2e -d "$work/rootfs" "$work/disk.img" 3G >/dev/null
}

# ------------------------------------------------------------ boot and parse

# boot N: boot the disk once; the guest runs boot N's scenarios and powers off.
boot() {
	local n=$1 log=$work/serial.boot$1.log rc=0
	timeout --kill-after=10 "$boot_timeout" qemu-system-x86_64 \
		-accel tcg -m "$memory" -smp 2 -nographic -no-reboot -nic none \
		-kernel "$work/vmlinuz" -initrd "$work/initrd.img" \
		-drive "file=$work/disk.img,if=virtio,format=raw" \
		-append "root=/dev/vda rw console=ttyS0 loglevel=4 panic=-1 systemd.show_status=error systemd.journald.forward_to_console=0" \
		</dev/null >"$log" 2>&1 || rc=$?
	if ((rc == 124 || rc == 137)); then
		echo "e2e: boot $n did not power off within ${boot_timeout}s" >&2
		boot_timed_out[$n]=1
	elif ((rc != 0)); then
		echo "e2e: qemu exited $rc on boot $n" >&2
	fi
}

declare -A boot_timed_out=()
results=()
failed=0

collect() { # collect N: one row per expected scenario of boot N
	local n=$1 log=$work/serial.boot$1.log name line verdict secs detail
	local clean
	clean=$(tr '\r' '\n' <"$log" 2>/dev/null || true)
	if ! grep -qa "E2E-BEGIN boot=$n" <<<"$clean"; then
		echo "e2e: boot $n never reached the scenarios; serial log tail ($log):" >&2
		tail -n 60 <<<"$clean" | sed 's/^/    | /' >&2
		failed=1
	fi
	while read -r name; do
		line=$(grep -aoE "E2E $name (PASS|FAIL) .*" <<<"$clean" | tail -n1 || true)
		if [[ -z $line ]]; then
			verdict=MISSING secs=- detail="no result on the console${boot_timed_out[$n]:+ (boot timed out)}"
		else
			read -r _ _ verdict secs detail <<<"$line"
		fi
		[[ $verdict == PASS ]] || failed=1
		results+=("$(printf '%-5s %-16s %-8s %7s  %s' "$n" "$name" "$verdict" "$secs" "$detail")")
	done < <(bash "$e2e/guest/rdmad-e2e.sh" list "$n")
	if grep -qa "E2E-LOG" <<<"$clean"; then
		echo "e2e: guest diagnostics of boot $n:" >&2
		grep -a "E2E-LOG" <<<"$clean" | sed 's/^.*E2E-LOG /    | /' >&2
	fi
}

main() {
	# One run per work directory: a second `make e2e` would delete the disk
	# under the first one's qemu.
	mkdir -p "$(dirname "$work")"
	exec 9>"$work.lock"
	flock -n 9 || die "another e2e run is using $work (set E2E_WORKDIR)"
	step deps install_deps
	step image eval 'tarball=$("$e2e/image.sh")'
	echo "e2e: rootfs $tarball" >&2
	step install prepare_rootfs
	step disk make_disk
	step boot1 boot 1
	if [[ -n ${boot_timed_out[1]:-} ]]; then
		echo "e2e: skipping the reboot: boot 1 did not finish" >&2
	else
		step boot2 boot 2
	fi
	report
}

# report: the table of every expected scenario from the serial logs in $work;
# exits non-zero if the guest did not boot, a scenario is missing or failed.
report() {
	collect 1
	collect 2

	echo
	printf '%-5s %-16s %-8s %7s  %s\n' boot scenario result seconds detail
	printf '%s\n' "${results[@]}"
	echo
	((${#timings[@]} == 0)) || echo "timings: ${timings[*]}; total $((SECONDS - t_start))s"
	echo "serial logs: $work/serial.boot1.log $work/serial.boot2.log; disk: $work/disk.img"
	if ((failed)); then
		echo "e2e: FAILED" >&2
		for n in 1 2; do
			[[ -f $work/serial.boot$n.log ]] || continue
			echo "e2e: serial log tail, boot $n:" >&2
			tr '\r' '\n' <"$work/serial.boot$n.log" | grep -av 'E2E-LOG' | tail -n 25 | sed 's/^/    | /' >&2
		done
		exit 1
	fi
	echo "e2e: PASSED"
}

case ${1:-} in
report) # report DIR: re-read the serial logs of a finished run
	work=${2:?usage: run.sh report WORKDIR}
	report
	;;
"") main ;;
*) echo "usage: $0 [report WORKDIR]" >&2; exit 2 ;;
esac
