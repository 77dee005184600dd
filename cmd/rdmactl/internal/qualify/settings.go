package qualify

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/ethtool"
	"github.com/rdmad/rdmad/daemon/host"
)

// The settings qualify tries, by rdmad's names for them (Port.Settings),
// and the value it writes instead of each one found: legal on every
// driver rdmad knows, and as small a change as the setting allows.

// The RoCE modes configfs takes.
const (
	modeV1 = "IB/RoCE v1"
	modeV2 = "RoCE v2"
)

// trials lists the trials of the port, in the order they run: the
// configfs and sysfs settings, then DCB, then ethtool, then OFED's ECN.
func (r *portRun) trials() []trial {
	dev, port, netdev := r.t.dev.Name, r.t.port, r.t.netdev
	cm := host.ConfigfsPortPath(dev, port)
	out := []trial{
		r.fileTrial("roce_mode", "RoCE mode", cm, "default_roce_mode", func(v string) string {
			if v == modeV2 {
				return modeV1
			}
			return modeV2
		}),
		r.fileTrial("roce_tos", "RoCE TOS", cm, "default_roce_tos", func(v string) string {
			if v == "106" {
				return "72"
			}
			return "106"
		}),
		r.trafficClassTrial(),
	}
	out = append(out, r.dcbTrials(netdev)...)
	out = append(out, r.ethtoolTrials(netdev)...)
	ecnRP, ecnNP := ecnDir(netdev, "roce_rp", "enable"), ecnDir(netdev, "roce_np", "enable")
	out = append(out,
		trialOf[[2]string]{setting: "qos_ecn", heading: "ECN priorities", notice: EventInotify, dir: ecnNP,
			read: func() ([2]string, error) {
				rp, err := r.readFile(path.Join(ecnRP, "3"), "OFED's ecn/roce_rp (MLNX_OFED and DOCA-OFED drivers only)")
				if err != nil {
					return [2]string{}, err
				}
				np, err := r.readFile(path.Join(ecnNP, "3"), "OFED's ecn/roce_np")
				return [2]string{rp, np}, err
			},
			alt: func(v [2]string) [2]string {
				if v == [2]string{"1", "1"} {
					return [2]string{"0", "0"}
				}
				return [2]string{"1", "1"}
			},
			write: func(v [2]string) error {
				if err := r.writeFile(path.Join(ecnRP, "3"), v[0]); err != nil {
					return err
				}
				return r.writeFile(path.Join(ecnNP, "3"), v[1])
			},
			text:  func(v [2]string) string { return fmt.Sprintf("priority 3: reaction %s, notification %s", v[0], v[1]) },
			files: []string{path.Join(ecnRP, "3"), path.Join(ecnNP, "3")},
		},
		r.fileTrial("qos_cnp_dscp", "CNP DSCP", ecnDir(netdev, "roce_np"), "cnp_dscp", func(v string) string {
			if v == "48" {
				return "46"
			}
			return "48"
		}),
		r.fileTrial("qos_cnp_priority", "CNP priority", ecnDir(netdev, "roce_np"), "cnp_802p_prio", func(v string) string {
			if v == "6" {
				return "5"
			}
			return "6"
		}),
	)
	return out
}

// writeFile writes a setting's file: on a host in place without
// truncating it (host.WriteKernelAttr: the truncation would be a
// notification of its own, also for a value the kernel refuses), on a
// fixture, whose files are plain files, as rdmad writes them.
func (r *portRun) writeFile(rel, v string) error {
	if r.k.Fixture {
		return r.k.Host.WriteString(rel, v)
	}
	return host.WriteKernelAttr(r.k.Host.Path(rel), []byte(v))
}

// readFile reads a setting's file; a missing one is not offered (what
// says whose file it is).
func (r *portRun) readFile(rel, what string) (string, error) {
	s, err := r.k.Host.ReadString(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return "", notOffered{fmt.Sprintf("no /%s: %s", rel, what)}
	}
	return s, err
}

// fileTrial tries a setting kept in one file (configfs, sysfs) whose text
// is its value.
func (r *portRun) fileTrial(setting, title, dir, file string, alt func(string) string) trial {
	rel := path.Join(dir, file)
	what := "a file of OFED's driver (MLNX_OFED and DOCA-OFED only)"
	if strings.HasPrefix(dir, host.ConfigfsRdmaCM) {
		what = "configfs rdma_cm has no such port (load rdma_cm; rdmad makes the device's directory)"
	}
	return trialOf[string]{setting: setting, heading: title, notice: EventInotify, dir: dir, files: []string{rel},
		read: func() (string, error) {
			if err := r.configfsDir(dir); err != nil {
				return "", err
			}
			return r.readFile(rel, what)
		},
		alt:   alt,
		write: func(v string) error { return r.writeFile(rel, v) },
	}
}

// configfsDir makes a device's configfs rdma_cm directory when it is
// missing (the kernel then makes its ports), and removes it after the
// port (rdma_cm drops it with the device anyway).
func (r *portRun) configfsDir(dir string) error {
	if !strings.HasPrefix(dir, host.ConfigfsRdmaCM) || r.k.Host.Exists(dir) {
		return nil
	}
	devDir := path.Join(host.ConfigfsRdmaCM, r.t.dev.Name)
	if !r.k.Host.Exists(host.ConfigfsRdmaCM) || r.k.Host.Exists(devDir) {
		return nil // reading says what is missing
	}
	if err := r.k.Host.Mkdir(devDir); err != nil {
		return fmt.Errorf("make /%s: %w", devDir, err)
	}
	r.cleanup = append(r.cleanup, func() error { return removeDir(r.k.Host.Path(devDir)) })
	return nil
}

// trafficClassTrial tries OFED's global traffic class of the port: the
// driver prints "Global tclass=N" while one is set and takes -1 for none.
func (r *portRun) trafficClassTrial() trial {
	dir := trafficClassDir(r.t.dev.Name, r.t.port)
	rel := path.Join(dir, "traffic_class")
	return trialOf[int]{setting: "roce_traffic_class", heading: "global traffic class", notice: EventInotify, dir: dir, files: []string{rel},
		read: func() (int, error) {
			s, err := r.readFile(rel, "a file of OFED's driver (MLNX_OFED and DOCA-OFED only)")
			if err != nil {
				return 0, err
			}
			for _, line := range strings.Split(s, "\n") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Global tclass="); ok {
					return strconv.Atoi(v)
				}
			}
			return -1, nil
		},
		alt: func(v int) int {
			if v == 106 {
				return 72
			}
			return 106
		},
		write: func(v int) error { return r.writeFile(rel, strconv.Itoa(v)) },
		text: func(v int) string {
			if v < 0 {
				return "unset"
			}
			return strconv.Itoa(v)
		},
	}
}

// dcbTrials try the DCB settings through DCB netlink, each on the state
// read just before (the other objects written back as they are).
func (r *portRun) dcbTrials(netdev string) []trial {
	k := r.k.DCB
	get := func() (dcb.IEEE, error) {
		if netdev == "" {
			return dcb.IEEE{}, notOffered{"the port has no netdev"}
		}
		ie, err := k.Get(netdev)
		if err != nil {
			return ie, notOfferedIf(err, netdev+" has no DCB")
		}
		return ie, nil
	}
	pfc := func(what string) (dcb.PFC, error) {
		ie, err := get()
		if err == nil && ie.PFC == nil {
			err = notOffered{netdev + "'s driver reports no PFC (" + what + ")"}
		}
		if err != nil {
			return dcb.PFC{}, err
		}
		return *ie.PFC, nil
	}
	ets := func() (dcb.ETS, error) {
		ie, err := get()
		if err == nil && ie.ETS == nil {
			err = notOffered{netdev + "'s driver reports no ETS"}
		}
		if err != nil {
			return dcb.ETS{}, err
		}
		return *ie.ETS, nil
	}
	buffer := func() (dcb.Buffer, error) {
		ie, err := get()
		if err == nil && ie.Buffer == nil {
			err = notOffered{netdev + "'s driver has no port buffers"}
		}
		if err != nil {
			return dcb.Buffer{}, err
		}
		return *ie.Buffer, nil
	}
	maskText := func(m uint8) string { return fmt.Sprint(dcb.Bits(m)) }
	return []trial{
		trialOf[uint8]{setting: "qos_pfc", heading: "PFC", notice: EventDCB,
			read: func() (uint8, error) {
				p, err := pfc("PFC")
				return p.Enabled, err
			},
			alt: func(m uint8) uint8 { return m ^ 1<<3 },
			write: func(m uint8) error {
				p, err := pfc("PFC")
				if err != nil {
					return err
				}
				p.Enabled = m
				return k.SetPFC(netdev, p)
			},
			text: maskText,
		},
		trialOf[uint16]{setting: "qos_cable_length", heading: "cable length", notice: EventDCB,
			read: func() (uint16, error) {
				p, err := pfc("the PFC delay")
				return p.Delay, err
			},
			alt: func(d uint16) uint16 {
				if d == 10 {
					return 7
				}
				return 10
			},
			write: func(d uint16) error {
				p, err := pfc("the PFC delay")
				if err != nil {
					return err
				}
				p.Delay = d
				return k.SetPFC(netdev, p)
			},
		},
		trialOf[[]dcb.App]{setting: "qos_trust", heading: "trust and DSCP map", notice: EventDCB,
			read: func() ([]dcb.App, error) {
				ie, err := get()
				if err != nil {
					return nil, err
				}
				out := []dcb.App{}
				for _, a := range ie.Apps {
					if a.Selector == dcb.SelDSCP {
						out = append(out, a)
					}
				}
				return out, nil
			},
			alt: func(apps []dcb.App) []dcb.App {
				if len(apps) == 0 {
					return []dcb.App{dcb.DSCP(26, 3)} // trust pcp to dscp
				}
				next := slices.Clone(apps)
				next[0].Priority = (next[0].Priority + 1) % dcb.MaxPrio // one DSCP to another priority
				return next
			},
			write: func(want []dcb.App) error { return setDSCP(k, netdev, want) },
			same:  sameApps,
			text: func(apps []dcb.App) string {
				if len(apps) == 0 {
					return "pcp"
				}
				var s []string
				for _, a := range apps {
					s = append(s, fmt.Sprintf("%d:%d", a.Protocol, a.Priority))
				}
				if len(s) > 4 {
					s = append(s[:4], fmt.Sprintf("... (%d entries)", len(apps)))
				}
				return "dscp " + strings.Join(s, " ")
			},
		},
		trialOf[[dcb.MaxPrio]uint8]{setting: "qos_prio_tc", heading: "ETS priority classes", notice: EventDCB,
			read: func() ([dcb.MaxPrio]uint8, error) {
				e, err := ets()
				return e.PrioTC, err
			},
			alt: func(pt [dcb.MaxPrio]uint8) [dcb.MaxPrio]uint8 {
				pt[3] = (pt[3] + 1) % dcb.MaxPrio
				return pt
			},
			write: func(pt [dcb.MaxPrio]uint8) error {
				e, err := ets()
				if err != nil {
					return err
				}
				e.PrioTC = pt
				return k.SetETS(netdev, e)
			},
		},
		trialOf[bandwidth]{setting: "qos_tc_bandwidth", heading: "ETS bandwidth", notice: EventDCB,
			read: func() (bandwidth, error) {
				e, err := ets()
				return bandwidth{e.TSA, e.TxBW}, err
			},
			alt: func(b bandwidth) bandwidth {
				next := bandwidth{}
				for i := range next.TSA {
					next.TSA[i] = dcb.TSAStrict
				}
				next.TSA[0], next.TSA[1] = dcb.TSAETS, dcb.TSAETS
				next.BW[0], next.BW[1] = 50, 50
				if sameBandwidth(b, next) {
					next.BW[0], next.BW[1] = 70, 30
				}
				return next
			},
			write: func(b bandwidth) error {
				e, err := ets()
				if err != nil {
					return err
				}
				e.TSA, e.TxBW = b.TSA, b.BW
				return k.SetETS(netdev, e)
			},
			same: sameBandwidth,
		},
		trialOf[[dcb.MaxPrio]uint64]{setting: "qos_tc_maxrate", heading: "rate limits", notice: EventDCB,
			read: func() ([dcb.MaxPrio]uint64, error) {
				ie, err := get()
				if err == nil && ie.Maxrate == nil {
					err = notOffered{netdev + "'s driver has no rate limits"}
				}
				if err != nil {
					return [dcb.MaxPrio]uint64{}, err
				}
				return ie.Maxrate.Rate, nil
			},
			alt: func(rate [dcb.MaxPrio]uint64) [dcb.MaxPrio]uint64 {
				if rate[0] == 0 {
					rate[0] = 10_000_000 // 10 Gbit/s: a whole number of every unit a driver keeps
				} else {
					rate[0] = 0
				}
				return rate
			},
			write: func(rate [dcb.MaxPrio]uint64) error { return k.SetMaxrate(netdev, dcb.Maxrate{Rate: rate}) },
			text:  func(rate [dcb.MaxPrio]uint64) string { return fmt.Sprint(rate[:]) + " kbit/s" },
		},
		trialOf[[dcb.MaxPrio]uint8]{setting: "qos_prio_buffer", heading: "priority buffers", notice: EventDCB,
			read: func() ([dcb.MaxPrio]uint8, error) {
				b, err := buffer()
				return b.PrioBuffer, err
			},
			alt: func(pb [dcb.MaxPrio]uint8) [dcb.MaxPrio]uint8 {
				pb[3] = 1 - min(pb[3], 1)
				return pb
			},
			write: func(pb [dcb.MaxPrio]uint8) error {
				b, err := buffer()
				if err != nil {
					return err
				}
				b.PrioBuffer = pb
				return k.SetBuffer(netdev, b)
			},
		},
		trialOf[[dcb.MaxBuffers]uint32]{setting: "qos_buffer_size", heading: "buffer sizes", notice: EventDCB,
			read: func() ([dcb.MaxBuffers]uint32, error) {
				b, err := buffer()
				return b.Size, err
			},
			alt: func(s [dcb.MaxBuffers]uint32) [dcb.MaxBuffers]uint32 {
				if s[1] == 0 { // half of buffer 0 to buffer 1, the total kept
					s[1] = s[0] / 2
					s[0] -= s[1]
				} else {
					s[0] += s[1]
					s[1] = 0
				}
				return s
			},
			write: func(s [dcb.MaxBuffers]uint32) error {
				b, err := buffer()
				if err != nil {
					return err
				}
				b.Size = s
				return k.SetBuffer(netdev, b)
			},
		},
	}
}

// bandwidth is ETS's algorithms and shares of each traffic class.
type bandwidth struct {
	TSA [dcb.MaxPrio]dcb.TSA
	BW  [dcb.MaxPrio]uint8
}

func (b bandwidth) String() string {
	var s []string
	for i := range b.TSA {
		s = append(s, fmt.Sprintf("%s:%d", b.TSA[i], b.BW[i]))
	}
	return strings.Join(s, " ")
}

// sameBandwidth compares the algorithms, and the shares of the ETS
// classes only: a driver reports its own share for a strict or vendor
// class (mlx5: 100).
func sameBandwidth(a, b bandwidth) bool {
	for i := range a.TSA {
		if a.TSA[i] != b.TSA[i] || a.TSA[i] == dcb.TSAETS && a.BW[i] != b.BW[i] {
			return false
		}
	}
	return true
}

// sameApps compares DSCP entries as a set: the kernel's list order is the
// order of their writes.
func sameApps(a, b []dcb.App) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// setDSCP makes the netdev's DSCP entries want: the entries not wanted
// deleted, the missing ones added.
func setDSCP(k dcb.Kernel, netdev string, want []dcb.App) error {
	ie, err := k.Get(netdev)
	if err != nil {
		return err
	}
	for _, a := range ie.Apps {
		if a.Selector == dcb.SelDSCP && !slices.Contains(want, a) {
			if slices.ContainsFunc(want, func(w dcb.App) bool { return w.Protocol == a.Protocol }) {
				continue // replaced by the add below (mlx5 keeps one entry per DSCP)
			}
			if err := k.DelApp(netdev, a); err != nil {
				return err
			}
		}
	}
	for _, a := range want {
		if !slices.Contains(ie.Apps, a) {
			if err := k.SetApp(netdev, a); err != nil {
				return err
			}
		}
	}
	// A driver that keeps several entries per DSCP: the replaced ones go.
	ie, err = k.Get(netdev)
	if err != nil {
		return err
	}
	for _, a := range ie.Apps {
		if a.Selector == dcb.SelDSCP && !slices.Contains(want, a) {
			if err := k.DelApp(netdev, a); err != nil {
				return err
			}
		}
	}
	return nil
}

// ethtoolTrials try the global pause and the PFC storm timeout.
func (r *portRun) ethtoolTrials(netdev string) []trial {
	k := r.k.Ethtool
	return []trial{
		trialOf[ethtool.Pause]{setting: "qos_pause", heading: "global pause", notice: EventPause,
			read: func() (ethtool.Pause, error) {
				if netdev == "" {
					return ethtool.Pause{}, notOffered{"the port has no netdev"}
				}
				p, err := k.Pause(netdev)
				return p, notOfferedIf(err, netdev+" has no pause parameters")
			},
			alt: func(p ethtool.Pause) ethtool.Pause {
				on := !(p.RX && p.TX)
				p.RX, p.TX = on, on
				return p
			},
			write: func(p ethtool.Pause) error { return k.SetPause(netdev, p.RX, p.TX) },
			same:  func(a, b ethtool.Pause) bool { return a.RX == b.RX && a.TX == b.TX },
			text:  func(p ethtool.Pause) string { return fmt.Sprintf("rx %s tx %s", onOff(p.RX), onOff(p.TX)) },
		},
		trialOf[uint16]{setting: "qos_pfc_storm_timeout", heading: "PFC storm timeout", notice: noNotice,
			read: func() (uint16, error) {
				if netdev == "" {
					return 0, notOffered{"the port has no netdev"}
				}
				v, err := k.PFCStormTimeout(netdev)
				return v, notOfferedIf(err, netdev+" has no pfc-prevention-tout tunable")
			},
			alt: func(v uint16) uint16 {
				if v == 0 {
					return 100
				}
				return 0
			},
			write: func(v uint16) error { return k.SetPFCStormTimeout(netdev, v) },
			text:  func(v uint16) string { return fmt.Sprintf("%d ms", v) },
		},
	}
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// notOfferedIf wraps an error that says the netdev has no such thing
// (EOPNOTSUPP, a netdev the fixture does not list) as not offered, saying
// what.
func notOfferedIf(err error, what string) error {
	if err == nil {
		return nil
	}
	if r, _ := readFailure(err); r == NotOffered {
		return notOffered{fmt.Sprintf("%s (%s)", what, err)}
	}
	return err
}
