#!/usr/bin/env bash
# Regenerates the fixture host trees under test/hosts/ from real layouts
# (values copied from ConnectX-5, ConnectX-3 VPI, Omni-Path hfi1 and rxe
# hosts). The trees are committed; rerun this only to change them.
# Layout rules that matter to rdmad, as on a real kernel:
#   sys/class/infiniband/<dev> -> ../../devices/.../infiniband/<dev>
#   <dev>/device -> the PCI function (absent for soft devices), whose driver link names the driver
#   ports/<n>/gid_attrs/{types,ndevs}/<i> exist for populated GIDs only
#   configfs: sys/kernel/config/rdma_cm/<dev>/ports/<n>/default_roce_{mode,tos}
set -euo pipefail
cd "$(dirname "$0")"

w() { mkdir -p "$(dirname "$1")"; printf '%s\n' "$2" > "$1"; }

# pci_device ROOT PCIPATH DRIVER : a PCI function with its driver link
pci_device() {
	local root=$1 pci=$2 drv=$3
	mkdir -p "$root/sys/devices/$pci" "$root/sys/bus/pci/drivers/$drv"
	local depth; depth=$(tr -cd / <<<"sys/devices/$pci" | wc -c)
	ln -sfn "$(printf '../%.0s' $(seq "$depth"))bus/pci/drivers/$drv" "$root/sys/devices/$pci/driver"
	w "$root/sys/devices/$pci/vendor" 0x15b3
	w "$root/sys/bus/pci/drivers/$drv/uevent" ""  # git keeps no empty directories
}

# ib_device ROOT DEVPATH NAME : DEVPATH is the directory under sys/devices holding infiniband/NAME
ib_device() {
	local root=$1 devpath=$2 name=$3
	local d="$root/sys/devices/$devpath/infiniband/$name"
	mkdir -p "$d/ports" "$root/sys/class/infiniband"
	ln -sfn "../../devices/$devpath/infiniband/$name" "$root/sys/class/infiniband/$name"
	if [[ $devpath != virtual ]]; then ln -sfn "../../../$(basename "$devpath")" "$d/device"; fi
	echo "$d"
}

# netdev ROOT DEVPATH IFNAME [MTU] : an interface that is up with carrier
# (flags IFF_UP|IFF_BROADCAST|IFF_MULTICAST; sysfs flags has no IFF_LOWER_UP,
# carrier says it)
netdev() {
	local root=$1 devpath=$2 ifname=$3 n="$1/sys/devices/$2/net/$3"
	mkdir -p "$n" "$root/sys/class/net"
	ln -sfn "../../devices/$devpath/net/$ifname" "$root/sys/class/net/$ifname"
	w "$n/operstate" up; w "$n/flags" 0x1003; w "$n/carrier" 1; w "$n/mtu" "${4:-1500}"
}

# pci_link ROOT PCIPATH SPEED WIDTH [MAXSPEED MAXWIDTH] : the PCIe link of a
# function as the kernel prints it (pci_speed_string: "8.0 GT/s PCIe")
pci_link() {
	local d="$1/sys/devices/$2"
	w "$d/current_link_speed" "$3 GT/s PCIe"; w "$d/current_link_width" "$4"
	w "$d/max_link_speed" "${5:-$3} GT/s PCIe"; w "$d/max_link_width" "${6:-$4}"
}

# pma PORTDIR : the InfiniBand PortCounters a port answers through its PMA,
# as a port that has run for weeks has them: a few discards and one link
# loss from long before rdmad started (not news).
pma() {
	local c=$1/counters n
	for n in symbol_error link_error_recovery port_rcv_errors port_rcv_remote_physical_errors \
		port_rcv_switch_relay_errors port_xmit_constraint_errors port_rcv_constraint_errors \
		local_link_integrity_errors excessive_buffer_overrun_errors VL15_dropped; do
		w "$c/$n" 0
	done
	w "$c/link_downed" 1; w "$c/port_xmit_discards" 17
	w "$c/port_xmit_data" 2891562841; w "$c/port_rcv_data" 3157729712
	w "$c/port_xmit_packets" 90116455; w "$c/port_rcv_packets" 98733109
}

# roce_hw PORTDIR : mlx5's RoCE driver statistics (hw_counters), a handful
# of the ones doctor watches non-zero from before rdmad started
roce_hw() {
	local c=$1/hw_counters n
	for n in packet_seq_err implied_nak_seq_err local_ack_timeout_err out_of_buffer \
		rp_cnp_ignored rx_icrc_encapsulated duplicate_request rnr_nak_retry_err; do
		w "$c/$n" 0
	done
	w "$c/out_of_sequence" 12; w "$c/np_cnp_sent" 4021; w "$c/rp_cnp_handled" 3990; w "$c/lifespan" 10
}

# port DEVDIR N STATE PHYS RATE LINKLAYER LID SMLID "gidtype:ndev ..." (gidtype with _ for space)
port() {
	local p="$1/ports/$2"; shift 2
	w "$p/state" "$1"; w "$p/phys_state" "$2"; w "$p/rate" "$3"; w "$p/link_layer" "$4"
	w "$p/lid" "$5"; w "$p/sm_lid" "$6"; w "$p/lid_mask_count" 0; w "$p/cap_mask" 0x04010000
	local i=0 g
	for g in $7; do
		w "$p/gids/$i" "fe80:0000:0000:0000:ba59:9fff:fed4:2e7$i"
		local typ=${g%%:*}
		w "$p/gid_attrs/types/$i" "${typ//_/ }"
		if [[ $g == *:* && ${g#*:} != "" ]]; then w "$p/gid_attrs/ndevs/$i" "${g#*:}"; fi
		i=$((i + 1))
	done
}

# configfs ROOT DEV NPORTS MODE TOS
configfs() {
	local n
	for n in $(seq "$3"); do
		w "$1/sys/kernel/config/rdma_cm/$2/ports/$n/default_roce_mode" "$4"
		w "$1/sys/kernel/config/rdma_cm/$2/ports/$n/default_roce_tos" "$5"
	done
}

common() {
	local root=$1; shift
	mkdir -p "$root/sys/kernel/config/rdma_cm" "$root/etc/rdma/modules"
	w "$root/sys/module/ib_core/uevent" ""  # built-in or loaded modules show here too
	mkdir -p "$root/proc"; : > "$root/proc/modules"
	local m
	for m in "$@"; do
		echo "$m 16384 0 - Live 0x0000000000000000" >> "$root/proc/modules"
	done
	# /etc/rdma/modules as rdma-core ships it (Debian), so module loading has real lists.
	cat > "$root/etc/rdma/modules/rdma.conf" <<'EOC'
# These modules are loaded by the system if any RDMA devices is installed
# iSCSI over RDMA client support
ib_iser

# iSCSI over RDMA target support
ib_isert

# User access to RDMA verbs (supports libibverbs)
ib_uverbs

# User access to RDMA connection management (supports librdmacm)
rdma_ucm

# RDS over RDMA support
# rds_rdma

# NFS over RDMA client support
xprtrdma

# NFS over RDMA server support
svcrdma
EOC
	cat > "$root/etc/rdma/modules/infiniband.conf" <<'EOC'
# These modules are loaded by the system if any InfiniBand device is installed
# InfiniBand over IP netdevice
ib_ipoib

# Access to fabric management SMPs and GMPs from userspace.
ib_umad

# SCSI Remote Protocol target support
# ib_srpt
EOC
	cat > "$root/etc/rdma/modules/roce.conf" <<'EOC'
# These modules are loaded by the system if any RDMA over Converged Ethernet
# device is installed
EOC
	cat > "$root/etc/rdma/modules/opa.conf" <<'EOC'
# These modules are loaded by the system if any OmniPath Architecture device
# is installed

# Infiniband over IP netdevice
ib_ipoib

# Access to fabric management SMPs and GMPs from userspace.
ib_umad

# Omnipath Ethernet Virtual NIC netdevice
opa_vnic
EOC
	cat > "$root/etc/rdma/modules/iwarp.conf" <<'EOC'
# These modules are loaded by the system if any iWarp device is installed

# iWarp Port Mapper
iw_cm
EOC
}

mlx5() {
	local root=$1 i pci d
	for i in 0 1; do
		pci="pci0000:3a/0000:3a:00.0/0000:3b:00.$i"
		pci_device "$root" "$pci" mlx5_core
		pci_link "$root" "$pci" 8.0 16
		netdev "$root" "$pci" "ens1f${i}np${i}" 9000
		d=$(ib_device "$root" "$pci" "mlx5_$i")
		w "$d/node_type" "1: CA"; local guids=(2e7a 2e7b); w "$d/node_guid" "b859:9f03:00d4:${guids[$i]}"
		w "$d/sys_image_guid" "b859:9f03:00d4:2e7a"; w "$d/fw_ver" "16.35.2000"
		w "$d/hca_type" "MT4119"; w "$d/board_id" "MT_0000000080"; w "$d/node_desc" "demo-host mlx5_$i"
		port "$d" 1 "4: ACTIVE" "5: LinkUp" "100 Gb/sec (4X EDR)" Ethernet 0x0000 0x0000 \
			"IB/RoCE_v1:ens1f${i}np${i} RoCE_v2:ens1f${i}np${i}"
		pma "$d/ports/1"; roce_hw "$d/ports/1"
		configfs "$root" "mlx5_$i" 1 "RoCE v2" 0
	done
}

# ofed ROOT : the sysfs MLNX_OFED / DOCA-OFED's mlx5 driver adds to the mlx5
# host (upstream has none of it). Per netdev, ecn/roce_{rp,np}/enable/<prio>
# ("%d\n", firmware enables all eight) and the CNP marking (roce_np/cnp_dscp,
# roce_np/cnp_802p_prio, as firmware sets them); per RDMA port,
# tc/<port>/traffic_class, empty while no global traffic class is set.
ofed() {
	local root=$1 i p net d
	for i in 0 1; do
		net="$root/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.$i/net/ens1f${i}np${i}/ecn"
		for p in 0 1 2 3 4 5 6 7; do
			w "$net/roce_rp/enable/$p" 1
			w "$net/roce_np/enable/$p" 1
		done
		w "$net/roce_rp/rpg_max_rate" 0; w "$net/roce_rp/rpg_min_rate" 1
		w "$net/roce_np/cnp_dscp" 48; w "$net/roce_np/cnp_802p_prio" 6; w "$net/roce_np/min_time_between_cnps" 4
		d="$root/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.$i/infiniband/mlx5_$i"
		mkdir -p "$d/tc/1"; : > "$d/tc/1/traffic_class"
	done
}

# kernel_state ROOT NETDEV... : the fixture's DCB and ethtool state, which
# rdmad --root serves as DCB netlink and ethtool (fixture/kernel.json,
# docs/fixtures.md), netdevs in name order, as daemon/fixturekernel writes
# it. NETDEV is an mlx5 port as mlx5_core reports it after boot
# (docs/fixtures.md names the kernel lines: host DCBX, PFC off with the
# 7 m default cable length, the driver's initial ETS, no rate limits, PCP
# trust with no APP entry, global pause on); NETDEV:virtual a netdev
# without DCB, pause or tunable (veth).
kernel_state() {
	local root=$1 n sep=""; shift
	mkdir -p "$root/fixture"
	{
		printf '{\n  "netdev": {'
		for n in "$@"; do
			printf '%s\n' "$sep"
			sep=","
			if [[ $n == *:virtual ]]; then printf '    "%s": {}' "${n%:virtual}"; continue; fi
			cat <<EOC
    "$n": {
      "driver": "mlx5_core",
      "pfc_storm_timeout": 0,
      "pause": {
        "autoneg": false,
        "rx": true,
        "tx": true
      },
      "dcb": {
        "dcbx": [
          "host",
          "cee",
          "ieee"
        ],
        "app": [],
        "pfc": {
          "pfc_cap": 8,
          "prio_pfc": [],
          "macsec_bypass": 0,
          "delay": 7
        },
        "ets": {
          "willing": 0,
          "ets_cap": 8,
          "cbs": 0,
          "tc_bw": [
            100,
            100,
            100,
            100,
            100,
            100,
            100,
            100
          ],
          "tc_rx_bw": [
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0
          ],
          "tc_tsa": [
            "vendor",
            "vendor",
            "vendor",
            "vendor",
            "vendor",
            "vendor",
            "vendor",
            "vendor"
          ],
          "prio_tc": [
            1,
            0,
            2,
            3,
            4,
            5,
            6,
            7
          ],
          "reco_tc_bw": [
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0
          ],
          "reco_tc_tsa": [
            "strict",
            "strict",
            "strict",
            "strict",
            "strict",
            "strict",
            "strict",
            "strict"
          ],
          "reco_prio_tc": [
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0
          ]
        },
        "maxrate": {
          "tc_maxrate": [
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0
          ]
        },
        "buffer": {
          "prio_buffer": [
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0
          ],
          "buffer_size": [
            262016,
            0,
            0,
            0,
            0,
            0,
            0,
            0
          ],
          "total_size": 524160
        }
      }
EOC
			printf '    }'
		done
		printf '\n  }\n}\n'
	} > "$root/fixture/kernel.json"
}

mlx4() {
	local root=$1 pci="pci0000:00/0000:00:03.0/0000:05:00.0" d
	pci_device "$root" "$pci" mlx4_core
	pci_link "$root" "$pci" 8.0 8
	netdev "$root" "$pci" ens2 9000
	w "$root/sys/devices/$pci/mlx4_port1" ib
	w "$root/sys/devices/$pci/mlx4_port2" eth
	d=$(ib_device "$root" "$pci" mlx4_0)
	w "$d/node_type" "1: CA"; w "$d/node_guid" "0002:c903:0031:7e50"; w "$d/sys_image_guid" "0002:c903:0031:7e53"
	w "$d/fw_ver" "2.42.5000"; w "$d/hca_type" "MT4099"; w "$d/board_id" "MT_1090120019"
	port "$d" 1 "4: ACTIVE" "5: LinkUp" "56 Gb/sec (4X FDR)" InfiniBand 0x0003 0x0001 "IB/RoCE_v1:"
	port "$d" 2 "4: ACTIVE" "5: LinkUp" "40 Gb/sec (4X QDR)" Ethernet 0x0000 0x0000 "IB/RoCE_v1:ens2"
	pma "$d/ports/1"; pma "$d/ports/2"
	configfs "$root" mlx4_0 2 "IB/RoCE v1" 0
}

hfi1() {
	local root=$1 pci="pci0000:80/0000:80:02.0/0000:81:00.0" d
	pci_device "$root" "$pci" hfi1
	pci_link "$root" "$pci" 8.0 16
	d=$(ib_device "$root" "$pci" hfi1_0)
	w "$d/node_type" "1: CA"; w "$d/node_guid" "0011:7501:0179:e2d5"; w "$d/sys_image_guid" "0011:7501:0179:e2d5"
	w "$d/fw_ver" "1.27.0"; w "$d/hca_type" "HFI100"; w "$d/board_id" "Intel Omni-Path Host Fabric Interface Adapter 100 Series"
	port "$d" 1 "4: ACTIVE" "5: LinkUp" "100 Gb/sec (4X EDR)" InfiniBand 0x0001 0x0001 "IB/RoCE_v1:"
	pma "$d/ports/1"
	configfs "$root" hfi1_0 1 "IB/RoCE v1" 0
}

rxe() {
	local root=$1 d
	mkdir -p "$root/sys/devices/virtual/net/veth0" "$root/sys/class/net"
	ln -sfn ../../devices/virtual/net/veth0 "$root/sys/class/net/veth0"
	w "$root/sys/devices/virtual/net/veth0/operstate" up
	w "$root/sys/devices/virtual/net/veth0/flags" 0x1003; w "$root/sys/devices/virtual/net/veth0/carrier" 1
	w "$root/sys/devices/virtual/net/veth0/mtu" 9000
	d=$(ib_device "$root" virtual rxe0)
	w "$d/node_type" "1: CA"; w "$d/node_guid" "a8e5:95ff:fe1c:0d2b"; w "$d/sys_image_guid" "a8e5:95ff:fe1c:0d2b"
	w "$d/fw_ver" "0.0.0"; w "$d/parent" veth0
	port "$d" 1 "4: ACTIVE" "5: LinkUp" "10 Gb/sec (1X QDR)" Ethernet 0x0000 0x0000 "RoCE_v2:veth0"
	configfs "$root" rxe0 1 "RoCE v2" 0
}

# siw ROOT : a Soft-iWARP device on a veth (rdma link add siw0 type siw
# netdev veth1), as siw registers one: node type RNIC, an Ethernet port
# whose one GID is the MAC (siw_query_gid), no parent attribute (rxe's
# alone), no firmware version; configfs rdma_cm has the port's files with
# the kernel's defaults, as for any RDMA device.
siw() {
	local root=$1 d
	netdev "$root" virtual veth1 1500
	d=$(ib_device "$root" virtual siw0)
	w "$d/node_type" "4: RNIC"; w "$d/node_guid" "a8e5:95ff:fe1c:0d2c"; w "$d/sys_image_guid" "a8e5:95ff:fe1c:0d2c"
	w "$d/fw_ver" ""
	port "$d" 1 "4: ACTIVE" "5: LinkUp" "10 Gb/sec (1X QDR)" Ethernet 0x0000 0x0000 "IB/RoCE_v1:"
	configfs "$root" siw0 1 "IB/RoCE v1" 0
}

# A device whose driver exposes only the bare minimum (bnxt_re as seen
# through an old kernel): no fw_ver, no GID tables, no link_layer.
sparse() {
	local root=$1 pci="pci0000:00/0000:00:1c.0/0000:02:00.0" d
	pci_device "$root" "$pci" bnxt_en
	d=$(ib_device "$root" "$pci" bnxt_re0)
	w "$d/node_type" "1: CA"
	mkdir -p "$d/ports/1"; w "$d/ports/1/state" "1: DOWN"
	w "$d/ports/not-a-port/uevent" ""
}

# --- complete hosts for rdmactl doctor: what rdma-core, systemd, nfs-utils and
# the administrator (or rdmad) add to a host that works, beyond sysfs ---

# userspace ROOT DEVPATH "uverbsN:DEV ..." PROVIDER... : ib_uverbs' class
# devices (/dev nodes are character devices on a real host; git keeps no
# device nodes, so they are empty files here), rdma_ucm's /dev/infiniband/rdma_cm,
# and rdma-core's provider files (/etc/libibverbs.d/NAME.driver).
userspace() {
	local root=$1 devpath=$2 map=$3 u p; shift 3
	uverbs_class "$root" "$devpath" "$map"
	for u in $map; do w "$root/dev/infiniband/${u%%:*}" ""; done
	w "$root/dev/infiniband/rdma_cm" ""
	for p in "$@"; do w "$root/etc/libibverbs.d/$p.driver" "driver $p"; done
}

# uverbs_class ROOT DEVPATH "uverbsN:DEV ..." : ib_uverbs' class devices in sysfs
uverbs_class() {
	local root=$1 devpath=$2 u dev
	mkdir -p "$root/sys/class/infiniband_verbs"
	for u in $3; do
		dev=${u#*:}; u=${u%%:*}
		w "$root/sys/devices/$devpath/infiniband_verbs/$u/ibdev" "$dev"
		ln -sfn "../../devices/$devpath/infiniband_verbs/$u" "$root/sys/class/infiniband_verbs/$u"
	done
}

# distro ROOT debian|rhel RELEASE : os-release and the running kernel's release
distro() {
	local root=$1 id=$2 rel=$3
	case $id in
	debian) printf 'PRETTY_NAME="Debian GNU/Linux"\nNAME="Debian GNU/Linux"\nID=debian\n' > "$root/etc/os-release" ;;
	rhel) printf 'NAME="Red Hat Enterprise Linux"\nID="rhel"\nID_LIKE="fedora"\n' > "$root/etc/os-release" ;;
	esac
	w "$root/proc/sys/kernel/osrelease" "$rel"
}

# rdma_group ROOT MEMBERS : /etc/group with the rdma group rdma-core creates
rdma_group() {
	printf 'root:x:0:\nusers:x:100:\nrdma:x:996:%s\n' "$2" > "$1/etc/group"
}

# ipoib ROOT DEVPATH IFNAME PORT MODE MTU : an IPoIB interface (type 32) of
# the device at DEVPATH; dev_port is PORT - 1, as ipoib_parent_init sets it.
ipoib() {
	local root=$1 devpath=$2 ifname=$3 port=$4 n="$1/sys/devices/$2/net/$3"
	netdev "$root" "$devpath" "$ifname"
	w "$n/type" 32; w "$n/mode" "$5"; w "$n/mtu" "$6"
	w "$n/dev_port" $((port - 1)); w "$n/dev_id" "0x$((port - 1))"
	ln -sfn "../../../$(basename "$devpath")" "$n/device"
}

# A Soft-RoCE host set up by rdmad: rxe0 on veth0 declared as a link,
# [memlock] declared and rendered (the files are exactly what rdmad writes),
# user space complete. Nothing on it is wrong.
rxe_ready() {
	local root=$1
	rxe "$root"
	userspace "$root" virtual "uverbs0:rxe0" rxe
	distro "$root" debian 6.12.48+deb13-amd64
	rdma_group "$root" alice
	w "$root/sys/module/ib_core/parameters/netns_mode" Y
	cat > "$root/etc/rdma/rdmad.toml" <<'EOC'
[memlock]
group = "rdma"
soft = "unlimited"
hard = "unlimited"
services = true

[[link]]
name = "rxe0"
type = "rxe"
netdev = "veth0"
EOC
	mkdir -p "$root/etc/security/limits.d" "$root/etc/systemd/system.conf.d"
	cat > "$root/etc/security/limits.d/90-rdmad-memlock.conf" <<'EOC'
# Managed by rdmad from its [memlock] configuration; local changes are overwritten.
@rdma soft memlock unlimited
@rdma hard memlock unlimited
EOC
	cat > "$root/etc/systemd/system.conf.d/90-rdmad-memlock.conf" <<'EOC'
# Managed by rdmad from its [memlock] configuration; local changes are overwritten.
# Takes effect for services started after the next boot or `systemctl daemon-reexec`.
[Manager]
DefaultLimitMEMLOCK=infinity
EOC
}

# An InfiniBand NFS server on a ConnectX-3 with both ports on the fabric
# (subnet manager at LID 1), IPoIB ib0 connected and ib1 datagram, NFS over
# RDMA enabled and listening, RDMA netns exclusive declared and persisted
# with ib_core in the initramfs (initramfs-tools), memlock configured by
# hand the way the RHEL guide does, containerd allowed unlimited memlock.
# Nothing on it is wrong (the test sets the initramfs newer than modprobe.d).
ib_ready() {
	local root=$1 pci="pci0000:00/0000:00:03.0/0000:05:00.0" d rel=6.1.0-28-amd64
	pci_device "$root" "$pci" mlx4_core
	pci_link "$root" "$pci" 8.0 8
	w "$root/sys/devices/$pci/mlx4_port1" ib
	w "$root/sys/devices/$pci/mlx4_port2" ib
	d=$(ib_device "$root" "$pci" mlx4_0)
	w "$d/node_type" "1: CA"; w "$d/node_guid" "0002:c903:0031:7e50"; w "$d/sys_image_guid" "0002:c903:0031:7e53"
	w "$d/fw_ver" "2.42.5000"; w "$d/hca_type" "MT4099"; w "$d/board_id" "MT_1090120019"
	port "$d" 1 "4: ACTIVE" "5: LinkUp" "56 Gb/sec (4X FDR)" InfiniBand 0x0005 0x0001 "IB/RoCE_v1:"
	port "$d" 2 "4: ACTIVE" "5: LinkUp" "56 Gb/sec (4X FDR)" InfiniBand 0x0006 0x0001 "IB/RoCE_v1:"
	pma "$d/ports/1"; pma "$d/ports/2"
	ipoib "$root" "$pci" ib0 1 connected 65520
	ipoib "$root" "$pci" ib1 2 datagram 4092
	userspace "$root" "$pci" "uverbs0:mlx4_0" mlx4 mlx5 rxe
	distro "$root" debian "$rel"
	rdma_group "$root" alice,bob
	w "$root/sys/module/ib_core/parameters/netns_mode" N
	local m=$root/lib/modules/$rel k=kernel/drivers/infiniband
	w "$m/modules.alias" "alias pci:v000015B3d00001003sv*sd*bc*sc*i* mlx4_core
alias xprtrdma rpcrdma
alias svcrdma rpcrdma"
	w "$m/modules.dep" "$k/core/ib_core.ko.xz:
$k/core/ib_uverbs.ko.xz: $k/core/ib_core.ko.xz
kernel/drivers/net/ethernet/mellanox/mlx4/mlx4_core.ko.xz:
$k/hw/mlx4/mlx4_ib.ko.xz: $k/core/ib_uverbs.ko.xz $k/core/ib_core.ko.xz kernel/drivers/net/ethernet/mellanox/mlx4/mlx4_core.ko.xz
$k/sw/rxe/rdma_rxe.ko.xz: $k/core/ib_uverbs.ko.xz $k/core/ib_core.ko.xz
kernel/net/sunrpc/xprtrdma/rpcrdma.ko.xz: $k/core/rdma_cm.ko.xz $k/core/ib_core.ko.xz kernel/net/sunrpc/sunrpc.ko.xz"
	cat > "$root/etc/rdma/rdmad.toml" <<'EOC'
[netns]
mode = "exclusive"
EOC
	mkdir -p "$root/etc/modprobe.d"
	cat > "$root/etc/modprobe.d/rdmad-netns.conf" <<'EOC'
# Managed by rdmad from [netns] in rdmad.toml; changes here are overwritten.
# ib_core netns_mode: 1 = shared, 0 = exclusive.
options ib_core netns_mode=0
EOC
	w "$root/etc/initramfs-tools/modules" "# List of modules that you want to include in your initramfs.
mlx4_ib"
	w "$root/boot/initrd.img-$rel" ""
	w "$root/etc/security/limits.d/rdma.conf" "# configuration for rdma tuning
*       soft    memlock         unlimited
*       hard    memlock         unlimited
# rdma group may lock all memory
@rdma   soft    memlock         unlimited
@rdma   hard    memlock         unlimited"
	w "$root/etc/systemd/system.conf.d/50-memlock.conf" "[Manager]
DefaultLimitMEMLOCK=infinity"
	w "$root/usr/lib/systemd/system/containerd.service" "[Unit]
Description=containerd container runtime

[Service]
ExecStart=/usr/bin/containerd
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity"
	w "$root/etc/systemd/system/containerd.service.d/50-memlock.conf" "[Service]
LimitMEMLOCK=infinity"
	w "$root/etc/nfs.conf" "[nfsd]
# threads=8
rdma=y
rdma-port=20049"
	w "$root/proc/fs/nfsd/portlist" "rdma 20049
rdma 20049
tcp 2049
tcp 2049"
	w "$root/proc/net/tcp" "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:0801 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 21349 1 0000000000000000 100 0 0 10 0
   1: 0A00020F:0016 0A000202:C2A4 01 00000000:00000000 02:000A7B2E 00000000     0        0 24011 4 0000000000000000 20 4 31 10 -1"
}

build() {
	local name=$1; shift
	rm -rf "$name"; mkdir -p "$name"
	"$@"
}
build mlx5 eval 'common mlx5 configfs ib_core rdma_cm ib_cm iw_cm mlx5_core mlx5_ib; mlx5 mlx5; kernel_state mlx5 ens1f0np0 ens1f1np1'
build mlx5-ofed eval 'common mlx5-ofed configfs ib_core rdma_cm ib_cm iw_cm mlx5_core mlx5_ib; mlx5 mlx5-ofed; ofed mlx5-ofed; kernel_state mlx5-ofed ens1f0np0 ens1f1np1'
build mlx4 eval 'common mlx4 configfs ib_core rdma_cm mlx4_core mlx4_ib; mlx4 mlx4'
build hfi1 eval 'common hfi1 configfs ib_core rdma_cm hfi1; hfi1 hfi1'
build rxe eval 'common rxe configfs ib_core rdma_cm rdma_rxe; rxe rxe'
build siw eval 'common siw configfs ib_core iw_cm rdma_cm siw; siw siw'
build sparse eval 'common sparse configfs ib_core rdma_cm; sparse sparse'
build rxe-ready eval 'common rxe-ready configfs ib_core ib_cm iw_cm rdma_cm ib_uverbs rdma_ucm rdma_rxe; rxe_ready rxe-ready'
build ib-ready eval 'common ib-ready configfs ib_core ib_cm iw_cm rdma_cm ib_uverbs rdma_ucm ib_umad ib_ipoib mlx4_core mlx4_ib sunrpc nfsd rpcrdma; ib_ready ib-ready'
# The host as the rdmad DaemonSet's pod sees it (contrib/kubernetes): the
# host's sysfs (configfs included), /etc/rdma, /etc/modprobe.d and the
# kernel's /proc, but the container image's /dev (no /dev/infiniband) and
# /etc (no /etc/libibverbs.d, no limits or systemd files): the user-space
# checks fail there whatever the host has.
pod_view() {
	local root=$1
	uverbs_class "$root" "pci0000:3a/0000:3a:00.0/0000:3b:00.0" "uverbs0:mlx5_0"
	uverbs_class "$root" "pci0000:3a/0000:3a:00.0/0000:3b:00.1" "uverbs1:mlx5_1"
	mkdir -p "$root/etc/modprobe.d" "$root/var/lib/rdmad"
	w "$root/etc/modprobe.d/.keep" ""
	w "$root/var/lib/rdmad/.keep" ""
}
build pod eval 'common pod configfs ib_core rdma_cm ib_cm iw_cm ib_uverbs rdma_ucm mlx5_core mlx5_ib; mlx5 pod; pod_view pod'
# The demo host has rdma-core's user space, as a host a reader would try
# rdmad on: what `make demo`'s doctor then reports is what rdmad's policy
# changes (memlock) and what the demo's drop-in declares (mixed RoCE modes).
demo_userspace() {
	local root=$1
	userspace "$root" "pci0000:3a/0000:3a:00.0/0000:3b:00.0" "uverbs0:mlx5_0" mlx5
	userspace "$root" "pci0000:3a/0000:3a:00.0/0000:3b:00.1" "uverbs1:mlx5_1" mlx5
	userspace "$root" "pci0000:00/0000:00:03.0/0000:05:00.0" "uverbs2:mlx4_0" mlx4
	userspace "$root" virtual "uverbs3:rxe0" rxe
}
build demo eval 'common demo configfs ib_core rdma_cm ib_cm iw_cm ib_uverbs rdma_ucm mlx5_core mlx5_ib mlx4_core mlx4_ib rdma_rxe; mlx5 demo; mlx4 demo; rxe demo; demo_userspace demo; kernel_state demo ens1f0np0 ens1f1np1 veth0:virtual'
echo "fixtures written"
