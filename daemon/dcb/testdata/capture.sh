#!/usr/bin/env bash
# Regenerates the golden DCB netlink messages of this directory from
# independent implementations:
#   - iproute2's dcb(8), whose requests strace dumps, on a veth in a
#     throwaway network namespace (the veth has no DCB: the kernel answers
#     EOPNOTSUPP, but each request is sent first, which is all we keep);
#   - the uapi structs ieee_pfc, ieee_ets, ieee_maxrate and dcbnl_buffer
#     of linux/dcbnl.h, compiled with the C compiler (dcb pfc/ets/maxrate/
#     buffer set read the current values first and stop after that failing
#     GET on a veth, so their SET payloads are checked against the struct
#     layouts instead, inside the framing of the captured IEEE SETs).
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
capture app_add_veth0_dgram_4791-3 app add dev veth0 dgram-port-prio 4791:3
capture app_del_veth0_dgram_4791-3 app del dev veth0 dgram-port-prio 4791:3
capture dcbx_set_veth0_host_ieee dcbx set dev veth0 host ieee

# The uapi structs with distinct values in every field, as the C compiler
# lays them out: NAME_struct.hex holds the bytes, NAME_layout.txt the size
# and field offsets.
cat >"$tmp/structs.c" <<'C'
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <linux/dcbnl.h>
static void dump(const char *path, const void *p, size_t n) {
	FILE *f = fopen(path, "w");
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%s%02x", i ? " " : "", b[i]);
	fprintf(f, "\n");
	fclose(f);
}
#define OFF(s, f) offsetof(struct s, f)
int main(int argc, char **argv) {
	char path[4096];
	FILE *l;
	const char *dir = argv[1];
	(void)argc;

	struct ieee_pfc p;
	memset(&p, 0, sizeof p);
	p.pfc_cap = 8; p.pfc_en = 0x18; p.mbc = 1; p.delay = 0x1234;
	for (int i = 0; i < IEEE_8021QAZ_MAX_TCS; i++) {
		p.requests[i] = 0x0102030405060700ull + i;
		p.indications[i] = 0x1112131415161700ull + i;
	}
	snprintf(path, sizeof path, "%s/ieee_pfc_struct.hex", dir);
	dump(path, &p, sizeof p);
	snprintf(path, sizeof path, "%s/ieee_pfc_layout.txt", dir);
	l = fopen(path, "w");
	fprintf(l, "sizeof=%zu pfc_cap=%zu pfc_en=%zu mbc=%zu delay=%zu requests=%zu indications=%zu\n",
		sizeof p, OFF(ieee_pfc, pfc_cap), OFF(ieee_pfc, pfc_en), OFF(ieee_pfc, mbc),
		OFF(ieee_pfc, delay), OFF(ieee_pfc, requests), OFF(ieee_pfc, indications));
	fclose(l);

	struct ieee_ets e;
	memset(&e, 0, sizeof e);
	e.willing = 1; e.ets_cap = 8; e.cbs = 2;
	for (int i = 0; i < IEEE_8021QAZ_MAX_TCS; i++) {
		e.tc_tx_bw[i] = 0x10 + i; e.tc_rx_bw[i] = 0x20 + i; e.tc_tsa[i] = 0x30 + i;
		e.prio_tc[i] = 0x40 + i; e.tc_reco_bw[i] = 0x50 + i; e.tc_reco_tsa[i] = 0x60 + i;
		e.reco_prio_tc[i] = 0x70 + i;
	}
	snprintf(path, sizeof path, "%s/ieee_ets_struct.hex", dir);
	dump(path, &e, sizeof e);
	snprintf(path, sizeof path, "%s/ieee_ets_layout.txt", dir);
	l = fopen(path, "w");
	fprintf(l, "sizeof=%zu willing=%zu ets_cap=%zu cbs=%zu tc_tx_bw=%zu tc_rx_bw=%zu tc_tsa=%zu prio_tc=%zu tc_reco_bw=%zu tc_reco_tsa=%zu reco_prio_tc=%zu\n",
		sizeof e, OFF(ieee_ets, willing), OFF(ieee_ets, ets_cap), OFF(ieee_ets, cbs),
		OFF(ieee_ets, tc_tx_bw), OFF(ieee_ets, tc_rx_bw), OFF(ieee_ets, tc_tsa), OFF(ieee_ets, prio_tc),
		OFF(ieee_ets, tc_reco_bw), OFF(ieee_ets, tc_reco_tsa), OFF(ieee_ets, reco_prio_tc));
	fclose(l);

	struct ieee_maxrate m;
	memset(&m, 0, sizeof m);
	for (int i = 0; i < IEEE_8021QAZ_MAX_TCS; i++)
		m.tc_maxrate[i] = 0x2122232425262700ull + i;
	snprintf(path, sizeof path, "%s/ieee_maxrate_struct.hex", dir);
	dump(path, &m, sizeof m);
	snprintf(path, sizeof path, "%s/ieee_maxrate_layout.txt", dir);
	l = fopen(path, "w");
	fprintf(l, "sizeof=%zu tc_maxrate=%zu\n", sizeof m, OFF(ieee_maxrate, tc_maxrate));
	fclose(l);

	struct dcbnl_buffer b;
	memset(&b, 0, sizeof b);
	for (int i = 0; i < IEEE_8021Q_MAX_PRIORITIES; i++)
		b.prio2buffer[i] = 0x80 + i;
	for (int i = 0; i < DCBX_MAX_BUFFERS; i++)
		b.buffer_size[i] = 0x31323300u + i;
	b.total_size = 0x41424344u;
	snprintf(path, sizeof path, "%s/dcbnl_buffer_struct.hex", dir);
	dump(path, &b, sizeof b);
	snprintf(path, sizeof path, "%s/dcbnl_buffer_layout.txt", dir);
	l = fopen(path, "w");
	fprintf(l, "sizeof=%zu prio2buffer=%zu buffer_size=%zu total_size=%zu\n",
		sizeof b, OFF(dcbnl_buffer, prio2buffer), OFF(dcbnl_buffer, buffer_size), OFF(dcbnl_buffer, total_size));
	fclose(l);
	return 0;
}
C
gcc -Wall -o "$tmp/structs" "$tmp/structs.c"
"$tmp/structs" "$here"
for s in ieee_pfc ieee_ets ieee_maxrate dcbnl_buffer; do
	echo "$s: $(cat "$here/${s}_layout.txt")"
done
