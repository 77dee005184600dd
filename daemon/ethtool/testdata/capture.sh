#!/usr/bin/env bash
# Regenerates the golden ethtool messages of this directory from ethtool(8)
# itself, on a veth in a throwaway network namespace (the veth has neither
# pause nor tunables: the kernel answers EOPNOTSUPP, but each request is
# sent first, which is all we keep):
#   - the ethtool netlink requests, as strace dumps them (the second
#     message of each run: the first resolves the family);
#   - the SIOCETHTOOL tunable buffer, which strace does not show: a small
#     LD_PRELOAD shim wraps ioctl(2) and writes the ifreq name and the
#     struct ethtool_tunable with its data as ethtool passes them;
#   - struct ethtool_tunable as the C compiler lays it out (its size and
#     field offsets).
# Needs root, ethtool, strace, gcc and linux-libc-dev. Run from anywhere:
#   sudo daemon/ethtool/testdata/capture.sh
# The family id (bytes 4..5), sequence number and port id (bytes 8..15)
# of each message vary from boot to boot and run to run: the test that
# compares takes the family from the file and masks the rest.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ns=rdmad-ethtool-capture-$$
tmp=$(mktemp -d)
ip netns add "$ns"
trap 'ip netns del "$ns"; rm -rf "$tmp"' EXIT
ip -n "$ns" link add veth0 type veth peer name veth1
ip -n "$ns" link set veth0 up

# capture NAME ARGS...: the second netlink request ethtool sends, as hex.
capture() {
	local name=$1
	shift
	ip netns exec "$ns" strace -o "$tmp/$name.strace" -f -e trace=sendto -e write=3 -xx ethtool "$@" >/dev/null 2>&1 || true
	awk '/sendto\(/ { n++ } n == 2 && /^ \| [0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]  / { print substr($0, 11, 48) }' "$tmp/$name.strace" |
		tr -s ' \n' ' ' | sed 's/^ //; s/ $//' >"$here/$name.hex"
	echo >>"$here/$name.hex"
	[ "$(wc -c <"$here/$name.hex")" -gt 1 ] || { echo "capture $name: no request" >&2; exit 1; }
	echo "$name: ethtool $*"
}
capture pause_get_veth0 --json -a veth0
capture pause_set_veth0_rx-off_tx-off -A veth0 rx off tx off
capture pause_set_veth0_rx-on_tx-on -A veth0 rx on tx on

cat >"$tmp/shim.c" <<'C'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <net/if.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
int ioctl(int fd, unsigned long req, ...) {
	static int (*real)(int, unsigned long, void *);
	va_list ap;
	va_start(ap, req);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	if (!real)
		real = (int (*)(int, unsigned long, void *))dlsym(RTLD_NEXT, "ioctl");
	if (req == SIOCETHTOOL) {
		const struct ifreq *ifr = arg;
		struct ethtool_tunable t;
		memcpy(&t, ifr->ifr_data, sizeof t);
		if (t.cmd == ETHTOOL_STUNABLE || t.cmd == ETHTOOL_GTUNABLE) {
			FILE *f = fopen(getenv("RDMAD_IOCTL_DUMP"), "w");
			const unsigned char *b = (const void *)ifr->ifr_data;
			fprintf(f, "# ifr_name %s\n", ifr->ifr_name);
			for (size_t i = 0; i < sizeof t + t.len; i++)
				fprintf(f, "%s%02x", i ? " " : "", b[i]);
			fprintf(f, "\n");
			fclose(f);
		}
	}
	return real(fd, req, arg);
}
C
gcc -Wall -shared -fPIC -o "$tmp/shim.so" "$tmp/shim.c" -ldl
# tunable NAME ARGS...: the tunable buffer ethtool hands the kernel.
tunable() {
	local name=$1
	shift
	ip netns exec "$ns" env LD_PRELOAD="$tmp/shim.so" RDMAD_IOCTL_DUMP="$here/$name.hex" ethtool "$@" >/dev/null 2>&1 || true
	[ -s "$here/$name.hex" ] || { echo "tunable $name: no ioctl" >&2; exit 1; }
	echo "$name: ethtool $*"
}
tunable tunable_set_veth0_100 --set-tunable veth0 pfc-prevention-tout 100
tunable tunable_get_veth0 --get-tunable veth0 pfc-prevention-tout

cat >"$tmp/layout.c" <<'C'
#include <stddef.h>
#include <stdio.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
int main(void) {
	printf("sizeof=%zu cmd=%zu id=%zu type_id=%zu len=%zu data=%zu ETHTOOL_GTUNABLE=%#x ETHTOOL_STUNABLE=%#x ETHTOOL_PFC_PREVENTION_TOUT=%d ETHTOOL_TUNABLE_U16=%d SIOCETHTOOL=%#x\n",
		sizeof(struct ethtool_tunable), offsetof(struct ethtool_tunable, cmd),
		offsetof(struct ethtool_tunable, id), offsetof(struct ethtool_tunable, type_id),
		offsetof(struct ethtool_tunable, len), offsetof(struct ethtool_tunable, data),
		ETHTOOL_GTUNABLE, ETHTOOL_STUNABLE, ETHTOOL_PFC_PREVENTION_TOUT, ETHTOOL_TUNABLE_U16, SIOCETHTOOL);
	return 0;
}
C
gcc -Wall -o "$tmp/layout" "$tmp/layout.c"
"$tmp/layout" >"$here/ethtool_tunable_layout.txt"
echo "ethtool_tunable: $(cat "$here/ethtool_tunable_layout.txt")"
