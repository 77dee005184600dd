package doctor

import (
	"fmt"
	"path"
	"strings"

	"github.com/rdmad/rdmad/daemon/config/value"
	"github.com/rdmad/rdmad/daemon/host"
)

// Where user-space RDMA access lives.
const (
	classUverbs   = "sys/class/infiniband_verbs"
	devInfiniband = "dev/infiniband"
	providersDir  = "etc/libibverbs.d"
)

// checkVerbs: ib_uverbs (libibverbs) and rdma_ucm (librdmacm) are loaded
// and every device has its /dev/infiniband/uverbsN.
func (d *diag) checkVerbs() {
	if len(d.devs) == 0 {
		return // no-device says it all
	}
	missing := d.missingModules("ib_uverbs", "rdma_ucm")
	if len(missing) > 0 {
		d.fail("verbs-modules-missing", hostSubject,
			"user-space RDMA is off: "+strings.Join(missing, ", ")+" not loaded (ib_uverbs serves libibverbs and /dev/infiniband/uverbs*, rdma_ucm serves librdmacm)",
			d.moduleFix(missing))
		return
	}
	uverbs := map[string]string{} // RDMA device -> uverbsN
	if names, err := boundedDir(d.h, classUverbs); err == nil {
		for _, n := range names {
			if dev := readAttr(d.h, path.Join(classUverbs, n, "ibdev")); dev != "" {
				uverbs[dev] = n
			}
		}
	}
	good := true
	var nodes []string
	for _, dev := range d.devs {
		u, ok := uverbs[dev.Name]
		switch {
		case !ok:
			good = false
			d.fail("uverbs-device-missing", deviceSubject(dev.Name),
				dev.Name+" has no user-verbs device (no /"+classUverbs+" entry names it): programs cannot open it",
				"journalctl -k -g uverbs; reload the driver of "+dev.Name)
		case !exists(d.h, path.Join(devInfiniband, u)) || isDir(d.h, path.Join(devInfiniband, u)):
			good = false
			d.fail("uverbs-device-missing", deviceSubject(dev.Name),
				"/"+path.Join(devInfiniband, u)+" of "+dev.Name+" is missing",
				"udevadm trigger --action=add --subsystem-match=infiniband_verbs")
		default:
			nodes = append(nodes, fmt.Sprintf("%s (%s)", u, dev.Name))
		}
	}
	if !exists(d.h, path.Join(devInfiniband, "rdma_cm")) {
		good = false
		d.fail("rdma-cm-device-missing", hostSubject,
			"/"+devInfiniband+"/rdma_cm is missing: librdmacm programs (rping, ucmatose, NFS clients in user space) cannot connect",
			"udevadm trigger --action=add --subsystem-match=misc --sysname-match=rdma_cm")
	}
	if good {
		d.ok("verbs-ready", hostSubject, "ib_uverbs and rdma_ucm loaded; /dev/infiniband/rdma_cm, "+strings.Join(nodes, ", "))
	}
}

// moduleFix loads missing modules now and says how they load at boot:
// rdmad loads the lists of /etc/rdma/modules when [modules] is enabled.
func (d *diag) moduleFix(missing []string) string {
	fix := "modprobe -a " + strings.Join(missing, " ")
	dir := d.pol.Modules.Directory
	if dir == "" {
		dir = "/etc/rdma/modules"
	}
	listed := d.modulesListed(path.Join(strings.TrimPrefix(dir, "/"), "rdma.conf"))
	var unlisted []string
	for _, m := range missing {
		if !listed[host.NormalizeModule(m)] {
			unlisted = append(unlisted, m)
		}
	}
	switch {
	case !d.pol.Modules.Enable:
		fix += "; for every boot: [modules] enable = true in /etc/rdma/rdmad.toml"
	case len(unlisted) > 0:
		fix += "; for every boot: add " + strings.Join(unlisted, " ") + " to " + dir + "/rdma.conf"
	default:
		fix += " (rdmad loads them from " + dir + "/rdma.conf: rdmactl status says why it did not)"
	}
	return fix
}

// modulesListed reads a modules list with the loader's own parser
// (host.ParseModuleList: comments only at the start of a line): the valid
// module names it lists. A line the loader skips lists nothing here either.
func (d *diag) modulesListed(rel string) map[string]bool {
	listed := map[string]bool{}
	data, err := boundedRead(d.h, rel, capConfig)
	if err != nil {
		return listed
	}
	for _, l := range host.ParseModuleList(data) {
		if l.Valid() {
			listed[host.NormalizeModule(l.Name)] = true
		}
	}
	return listed
}

// checkModuleLists reports, in every list of the modules directory rdmad
// loads, the lines that are not a module name, as the loader treats them:
// skipped (with systemd-modules-load's rules, "mlx5_ib # x" names the
// module "mlx5_ib # x": a comment only starts a line).
func (d *diag) checkModuleLists() {
	if !d.pol.Modules.Enable {
		return
	}
	dir := d.pol.Modules.Directory
	if dir == "" {
		dir = "/etc/rdma/modules"
	}
	for _, list := range []string{"rdma", "infiniband", "roce", "iwarp", "opa"} {
		rel := path.Join(strings.TrimPrefix(dir, "/"), list+".conf")
		data, err := boundedRead(d.h, rel, capConfig)
		if err != nil {
			continue // missing is normal; the loader reports what it cannot read
		}
		for _, l := range host.ParseModuleList(data) {
			if l.Valid() {
				continue
			}
			fix := "put the module alone on the line"
			if i := strings.IndexAny(l.Name, "#;"); i > 0 {
				if m := strings.TrimSpace(l.Name[:i]); host.ValidModuleName(m) {
					fix = fmt.Sprintf("write %q on line %d and move the comment to a line of its own (a line starting with # or ;)", m, l.Line)
				}
			}
			d.warn("modules-list-invalid", hostSubject,
				fmt.Sprintf("/%s:%d: %s is not a module name: rdmad skips this line when it loads the list, as systemd-modules-load does (a comment only starts a line)", rel, l.Line, value.Quote(l.Name)),
				fix)
		}
	}
}

// providerOf maps the kernel driver of a device's parent (or the soft
// driver) to the rdma-core provider that serves it, as named by its
// /etc/libibverbs.d/<name>.driver file.
var providerOf = map[string]string{
	"mlx5_core":     "mlx5",
	host.DriverMLX4: "mlx4",
	"hfi1":          "hfi1verbs",
	"ib_qib":        "ipathverbs",
	"bnxt_en":       "bnxt_re",
	"ice":           "irdma",
	"i40e":          "irdma",
	"irdma":         "irdma",
	"qede":          "qedr",
	"cxgb4":         "cxgb4",
	"efa":           "efa",
	"mana":          "mana",
	"hns3":          "hns",
	"vmw_pvrdma":    "vmw_pvrdma",
	"erdma":         "erdma",
	"be2net":        "ocrdma",
	"ib_mthca":      "mthca",
	"rdma_rxe":      "rxe",
	"siw":           "siw",
}

// checkProviders: libibverbs has provider configuration, one for every
// device whose driver doctor knows.
func (d *diag) checkProviders() {
	if len(d.devs) == 0 {
		return
	}
	providers := map[string]bool{}
	var names []string
	files, _ := boundedDir(d.h, providersDir)
	for _, f := range files {
		if !strings.HasSuffix(f, ".driver") {
			continue
		}
		_ = boundedLines(d.h, path.Join(providersDir, f), capAttr, func(line string) bool {
			if fl := strings.Fields(line); len(fl) == 2 && fl[0] == "driver" {
				providers[fl[1]] = true
				names = append(names, fl[1])
			}
			return true
		})
	}
	if len(providers) == 0 {
		d.fail("verbs-providers-missing", hostSubject,
			"no user-space provider configuration in /"+providersDir+": libibverbs finds no provider, ibv_devices lists nothing",
			d.installFix("ibverbs-providers", "libibverbs"))
		return
	}
	good := true
	for i := range d.devs {
		dev := &d.devs[i]
		want := providerOf[dev.Driver]
		if want == "" || providers[want] {
			continue
		}
		good = false
		d.fail("verbs-provider-missing", deviceSubject(dev.Name),
			fmt.Sprintf("no libibverbs provider %q for %s (driver %s) in /%s", want, dev.Name, dev.Driver, providersDir),
			d.installFix("ibverbs-providers", "libibverbs"))
	}
	if good {
		d.ok("verbs-providers", hostSubject, "libibverbs providers in /"+providersDir+": "+strings.Join(names, " "))
	}
}

// osRelease is what /etc/os-release says of the distribution family.
type osRelease struct{ debian, redhat bool }

func (d *diag) osRelease() osRelease {
	if d.distro != nil {
		return *d.distro
	}
	var r osRelease
	_ = boundedLines(d.h, "etc/os-release", capAttr*4, func(line string) bool {
		k, v, ok := strings.Cut(line, "=")
		if !ok || (k != "ID" && k != "ID_LIKE") {
			return true
		}
		for _, id := range strings.Fields(strings.Trim(v, `"'`)) {
			switch id {
			case "debian", "ubuntu":
				r.debian = true
			case "rhel", "fedora", "centos":
				r.redhat = true
			}
		}
		return true
	})
	d.distro = &r
	return r
}

// installFix names the package to install, by distribution family.
func (d *diag) installFix(debPkg, rpmPkg string) string {
	r := d.osRelease()
	switch {
	case r.debian:
		return "apt-get install " + debPkg
	case r.redhat:
		return "dnf install " + rpmPkg
	}
	return "apt-get install " + debPkg + " (Debian) or dnf install " + rpmPkg + " (RHEL)"
}
