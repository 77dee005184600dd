package doctor

import (
	"fmt"
	"path"
	"sort"
	"strings"
)

// Coexistence: another manager on the host that sets what rdmad sets. Each
// is detected from what rdmad can see under its root (files, unit files and
// their enablement links; no systemctl call, no process table), and each
// finding says which one should own the setting and how to hand it over.
// docs/decisions/doctor.md records what is observable and why.

// rhelMLX4Conf is RHEL's (and rdma-core's) mlx4 port-type file: mlx4-setup.sh
// applies it when mlx4_core loads ("<PCI address> <port1> [<port2>]").
const rhelMLX4Conf = "etc/rdma/mlx4.conf"

// rdmaCoreLoadUnit is rdma-core's module loader, one instance per list of
// /etc/rdma/modules, started by rdma-core's udev rules when a device of the
// transport appears.
const rdmaCoreLoadUnit = "rdma-load-modules@.service"

func (d *diag) checkCoexistence() {
	d.checkMLX4Conf()
	d.checkRDMALoadModules()
}

// checkMLX4Conf: rdma-core's mlx4.conf and rdmad's [[vpi]] both set mlx4
// port types; the one applied last wins, and which one that is depends on
// the boot (mlx4-setup at driver load, rdmad at the device's arrival).
func (d *diag) checkMLX4Conf() {
	var lines []string
	_ = boundedLines(d.h, rhelMLX4Conf, capConfig, func(line string) bool {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
			lines = append(lines, t)
		}
		return true
	})
	if len(lines) == 0 {
		return
	}
	if len(d.pol.VPI) == 0 {
		d.ok("coexist-mlx4-conf", hostSubject, fmt.Sprintf("/%s sets mlx4 port types (%d lines, applied by rdma-core when mlx4_core loads); rdmad declares none ([[vpi]])", rhelMLX4Conf, len(lines)))
		return
	}
	d.warn("coexist-mlx4-conf", hostSubject,
		fmt.Sprintf("mlx4 port types are set twice: by /%s (%d lines, rdma-core's mlx4-setup when mlx4_core loads) and by rdmad's [[vpi]] at %s; whichever runs last wins",
			rhelMLX4Conf, len(lines), d.pol.VPI[0].Source),
		"give them one owner: rdmad (keeps them across device re-registration and reports drift): comment out the lines of /"+rhelMLX4Conf+
			"; or rdma-core: remove the [[vpi]] rules from the file named")
}

// checkRDMALoadModules: rdma-core's rdma-load-modules@ instances and
// rdmad's [modules] both load /etc/rdma/modules/*.conf when a device
// appears. An instance counts when its unit file is installed and it is not
// masked (enablement does not matter: rdma-core's udev rules start it).
func (d *diag) checkRDMALoadModules() {
	if !d.pol.Modules.Enable {
		return
	}
	installed := ""
	for _, dir := range unitDirs {
		if p := path.Join(dir, rdmaCoreLoadUnit); exists(d.h, p) && !masked(d.h, p) {
			installed = "/" + p
			break
		}
	}
	if installed == "" {
		return
	}
	dir := d.pol.Modules.Directory
	if dir == "" {
		dir = "/etc/rdma/modules"
	}
	var live, off []string
	for _, list := range []string{"rdma", "infiniband", "roce", "iwarp", "opa"} {
		if !exists(d.h, path.Join(strings.TrimPrefix(dir, "/"), list+".conf")) {
			continue
		}
		unit := "rdma-load-modules@" + list + ".service"
		isMasked := false
		for _, udir := range unitDirs[:2] { // masks live in /etc or /run
			isMasked = isMasked || masked(d.h, path.Join(udir, unit))
		}
		if isMasked {
			off = append(off, unit)
		} else {
			live = append(live, unit)
		}
	}
	sort.Strings(live)
	sort.Strings(off)
	if len(live) == 0 {
		if len(off) > 0 {
			d.ok("coexist-rdma-load-modules", hostSubject, "rdmad loads "+dir+"/*.conf; rdma-core's "+strings.Join(off, ", ")+" masked")
		}
		return
	}
	d.warn("coexist-rdma-load-modules", hostSubject,
		fmt.Sprintf("the lists of %s are loaded twice when a device appears: by rdmad ([modules] enable) and by rdma-core's %s (%s, started by its udev rules)",
			dir, strings.Join(live, ", "), installed),
		"give them one owner: rdmad (one batched modprobe, reported in rdmactl status): systemctl mask "+strings.Join(live, " ")+
			"; or rdma-core: set [modules] enable = false")
}
