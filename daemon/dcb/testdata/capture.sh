#!/usr/bin/env bash
# Regenerates the golden DCB netlink messages of this directory from
# independent implementations:
#   - iproute2's dcb(8), whose requests strace dumps, on a veth in a
#     throwaway network namespace (the veth has no DCB: the kernel answers
#     EOPNOTSUPP, but each request is sent first, which is all we keep);
#   - the uapi struct ieee_pfc of linux/dcbnl.h, compiled with the C
#     compiler (dcb pfc set stops after its failing GET on a veth, so the
#     PFC SET payload is checked against the struct layout instead).
# Needs root, dcb, strace, gcc and linux-libc-dev. Run from anywhere:
#   sudo daemon/dcb/testdata/capture.sh
# The netlink sequence number and port id of each message are masked by
# the test that compares (dcb_golden_test.go).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ns=rdmad-dcb-capture-$$
tmp=$(mktemp -d)
ip netns add "$ns"
trap 'ip netns del "$ns"; rm -rf "$tmp"' EXIT
ip -n "$ns" link add veth0 type veth peer name veth1
ip -n "$ns" link set veth0 up

# capture NAME ARGS...: the first netlink request dcb sends, as hex bytes.
capture() {
	local name=$1
	shift
	ip netns exec "$ns" strace -o "$tmp/$name.strace" -f -e trace=sendto -e write=3 -xx dcb "$@" >/dev/null 2>&1 || true
	awk '/sendto\(/ { n++ } n == 1 && /^ \| [0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]  / { print substr($0, 11, 48) }' "$tmp/$name.strace" |
		tr -s ' \n' ' ' | sed 's/^ //; s/ $//' >"$here/$name.hex"
	echo >>"$here/$name.hex"
	[ -s "$here/$name.hex" ] && [ "$(wc -c <"$here/$name.hex")" -gt 1 ] || { echo "capture $name: no request" >&2; exit 1; }
	echo "$name: dcb $*"
}
capture ieee_get_veth0 pfc show dev veth0
capture app_add_veth0_26-3 app add dev veth0 dscp-prio 26:3
capture app_add_veth0_26-3_48-6 app add dev veth0 dscp-prio 26:3 48:6
capture app_del_veth0_26-3 app del dev veth0 dscp-prio 26:3

# struct ieee_pfc with distinct values in every field, as the C compiler
# lays it out, and its size and field offsets.
cat >"$tmp/pfc.c" <<'C'
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <linux/dcbnl.h>
int main(void) {
	struct ieee_pfc p;
	memset(&p, 0, sizeof p);
	p.pfc_cap = 8; p.pfc_en = 0x18; p.mbc = 1; p.delay = 0x1234;
	for (int i = 0; i < IEEE_8021QAZ_MAX_TCS; i++) {
		p.requests[i] = 0x0102030405060700ull + i;
		p.indications[i] = 0x1112131415161700ull + i;
	}
	const unsigned char *b = (const void *)&p;
	for (size_t i = 0; i < sizeof p; i++)
		printf("%s%02x", i ? " " : "", b[i]);
	printf("\n");
	fprintf(stderr, "sizeof=%zu pfc_cap=%zu pfc_en=%zu mbc=%zu delay=%zu requests=%zu indications=%zu\n",
		sizeof p, offsetof(struct ieee_pfc, pfc_cap), offsetof(struct ieee_pfc, pfc_en),
		offsetof(struct ieee_pfc, mbc), offsetof(struct ieee_pfc, delay),
		offsetof(struct ieee_pfc, requests), offsetof(struct ieee_pfc, indications));
	return 0;
}
C
gcc -o "$tmp/pfc" "$tmp/pfc.c"
"$tmp/pfc" >"$here/ieee_pfc_struct.hex" 2>"$here/ieee_pfc_layout.txt"
echo "ieee_pfc_struct: $(cat "$here/ieee_pfc_layout.txt")"
