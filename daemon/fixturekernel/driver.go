package fixturekernel

import (
	"slices"
	"syscall"

	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/ethtool"
)

// MLX5Driver is the driver of ConnectX-4 and later: a netdev whose Driver
// it is behaves as drivers/net/ethernet/mellanox/mlx5/core does (Linux
// 6.12, en_dcbnl.c and en_ethtool.c; the functions are named below).
const MLX5Driver = "mlx5_core"

// The mlx5 constants the behaviour follows (en_dcbnl.c, en_ethtool.c).
const (
	mlx5MaxCableLength = 1000 // MLX5E_MAX_CABLE_LENGTH: delays below it are kept
	mlx5MaxDSCP        = 64   // MLX5E_MAX_DSCP
	mlx5MaxBW          = 100  // MLX5E_MAX_BW_ALLOC
	mlx5StormAuto      = 100  // MLX5E_PFC_PREVEN_AUTO_TOUT_MSEC: what "auto" sets
	mlx5StormMin       = 80   // MLX5E_PFC_PREVEN_TOUT_MIN_MSEC
	mlx5StormMax       = 8000 // MLX5E_PFC_PREVEN_TOUT_MAX_MSEC
	mbit100, gbit      = 100_000, 1_000_000
)

func (n *Netdev) mlx5() bool { return n.Driver == MLX5Driver }

// setPFC is the driver's ieee_setpfc on the stored PFC; toggled says the
// port's link went down and up. mlx5e_dcbnl_ieee_setpfc changes the
// enable mask only when it differs, and then calls mlx5_toggle_port_link;
// it keeps a delay (the cable length) of 1..999 and ignores pfc_cap and
// mbc, which the GET reports from the hardware.
func (n *Netdev) setPFC(p dcb.PFC) (toggled bool) {
	cur := n.DCB.PFC.value()
	next := cur
	next.Enabled = p.Enabled
	switch {
	case !n.mlx5():
		next.Delay = p.Delay
	case p.Delay > 0 && p.Delay < mlx5MaxCableLength:
		next.Delay = p.Delay
	}
	if !n.mlx5() {
		next.Cap, next.MBC = p.Cap, p.MBC
	}
	n.DCB.PFC = pfcOf(next)
	return n.mlx5() && next.Enabled != cur.Enabled
}

// setETS is ieee_setets. mlx5e_dcbnl_ieee_setets refuses a priority's
// class of 8 or more and ETS shares that do not add up to 100
// (mlx5e_dbcnl_validate_ets); mlx5e_dcbnl_ieee_getets then reports the
// classes, the selection and the shares the firmware holds (a strict or
// vendor class at 100 %), ets_cap from the hardware, and nothing else.
func (n *Netdev) setETS(e dcb.ETS) syscall.Errno {
	if !n.mlx5() {
		e.Cap = n.DCB.ETS.Cap // read only
		n.DCB.ETS = etsOf(e)
		return 0
	}
	sum, ets := 0, false
	for i := range dcb.MaxPrio {
		if e.PrioTC[i] >= dcb.MaxPrio {
			return syscall.EINVAL
		}
		if e.TSA[i] == dcb.TSAETS {
			sum, ets = sum+int(e.TxBW[i]), true
		}
	}
	if ets && sum != mlx5MaxBW {
		return syscall.EINVAL
	}
	kept := dcb.ETS{Cap: n.DCB.ETS.Cap, PrioTC: e.PrioTC, TSA: e.TSA}
	for i := range dcb.MaxPrio {
		kept.TxBW[i] = mlx5MaxBW
		if e.TSA[i] == dcb.TSAETS {
			kept.TxBW[i] = e.TxBW[i]
		}
	}
	n.DCB.ETS = etsOf(kept)
	return 0
}

// setMaxrate is ieee_setmaxrate: mlx5e_dcbnl_ieee_setmaxrate stores a rate
// in units of 100 Mbit/s up to 25.5 Gbit/s (at least one unit) and of
// 1 Gbit/s above, and refuses more than 255 Gbit/s.
func (n *Netdev) setMaxrate(m dcb.Maxrate) syscall.Errno {
	if n.mlx5() {
		for i, kbps := range m.Rate {
			switch {
			case kbps == 0:
			case kbps <= 255*mbit100:
				m.Rate[i] = max(kbps/mbit100, 1) * mbit100
			case kbps <= 255*gbit:
				m.Rate[i] = kbps / gbit * gbit
			default:
				return syscall.EINVAL
			}
		}
	}
	n.DCB.Maxrate = &Maxrate{Rate: m.Rate}
	return 0
}

// setBuffer is dcbnl_setbuffer: which buffer each priority uses and the
// buffers' sizes; the total is the hardware's.
func (n *Netdev) setBuffer(b dcb.Buffer) {
	n.DCB.Buffer.PrioBuffer, n.DCB.Buffer.Size = b.PrioBuffer, b.Size
}

// setApp is ieee_setapp. mlx5e_dcbnl_ieee_setapp takes DSCP entries of
// DSCP 0..63 only (EINVAL otherwise) and replaces the DSCP's entry; the
// kernel's generic APP list (dcb_ieee_setapp) refuses an exact duplicate
// (EEXIST). The list is extended at its head, as list_add does.
func (n *Netdev) setApp(a dcb.App) syscall.Errno {
	apps := n.DCB.App
	if n.mlx5() {
		if a.Selector != dcb.SelDSCP || a.Protocol >= mlx5MaxDSCP {
			return syscall.EINVAL
		}
		apps = slices.DeleteFunc(apps, func(o App) bool { return o.Selector == a.Selector && o.Protocol == a.Protocol })
	} else if slices.Contains(apps, App(a)) {
		return syscall.EEXIST
	}
	n.DCB.App = append([]App{App(a)}, apps...)
	return 0
}

// delApp is ieee_delapp: the entry must exist (ENOENT); mlx5 takes DSCP
// entries only (mlx5e_dcbnl_ieee_delapp).
func (n *Netdev) delApp(a dcb.App) syscall.Errno {
	if n.mlx5() && (a.Selector != dcb.SelDSCP || a.Protocol >= mlx5MaxDSCP) {
		return syscall.EINVAL
	}
	i := slices.Index(n.DCB.App, App(a))
	if i < 0 {
		return syscall.ENOENT
	}
	n.DCB.App = slices.Delete(n.DCB.App, i, i+1)
	return 0
}

// setDCBX is setdcbx; it answers a status, not an errno (0 takes the
// mode). mlx5e_dcbnl_setdcbx refuses LLD-managed, takes mode 0 as "hand
// DCBX to the firmware" (the host bit goes), and refuses a mode without
// the host bit; another driver takes any mode.
func (n *Netdev) setDCBX(mode uint8) uint8 {
	caps, _ := dcbxBits(n.DCB.DCBX)
	switch {
	case !n.mlx5():
		caps = mode
	case mode&dcb.CapLLDManaged != 0:
		return 1
	case mode == 0:
		caps &^= dcb.CapHost
	case mode&dcb.CapHost == 0:
		return 1
	default:
		caps = mode
	}
	n.DCB.DCBX = DCBXWords(caps)
	return 0
}

// setStormTimeout is the pfc-prevention-tout tunable:
// mlx5e_set_pfc_prevention_tout takes 0 (off) or 80..8000 ms, and "auto"
// (0xffff) as 100 ms, which the GET then reports.
func (n *Netdev) setStormTimeout(ms uint16) syscall.Errno {
	if n.mlx5() {
		if ms == ethtool.PFCStormAuto {
			ms = mlx5StormAuto
		}
		if ms != 0 && (ms < mlx5StormMin || ms > mlx5StormMax) {
			return syscall.EINVAL
		}
	}
	n.PFCStormTimeout = &ms
	return 0
}
