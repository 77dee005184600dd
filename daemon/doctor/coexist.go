package doctor

import (
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/netns"
	"github.com/rdmad/rdmad/daemon/qos"
	"github.com/rdmad/rdmad/daemon/reconcile"
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
	d.checkNVIDIADriver()
	d.checkSRIOVOperator()
	d.checkRDMASharedDevicePlugin()
	d.checkLLDPad()
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
// rdmad's [modules] both load module lists when a device appears. An
// instance counts when its unit file is installed and it is not masked
// (enablement does not matter: rdma-core's udev rules start it). Loading a
// module that is loaded is a no-op, so two loaders of the same lists are
// harmless (ok, the default beside rdma-core on Debian and RHEL); they are
// worth a warning when they load different lists (rdmad's directory is not
// rdma-core's, and the lists differ) or when MLNX_OFED's openibd loads its
// own driver stack at boot too.
func (d *diag) checkRDMALoadModules() {
	if !d.pol.Modules.Enable {
		return
	}
	openibd := d.openibdLoads()
	// The template as systemd loads it: a mask in /etc hides /usr/lib's.
	file := unitFile(d.h, rdmaCoreLoadUnit)
	if file == "" && openibd == "" {
		return
	}
	installed := "/" + file
	dir, lists := d.moduleListFiles()
	if file == "" {
		lists = nil // no instance of rdma-core's loader runs
	}
	same := path.Clean(dir) == rdmaCoreModulesDir
	if !same && file != "" { // rdma-core runs an instance for each list of its own directory
		for _, list := range moduleLists {
			if exists(d.h, path.Join(strings.TrimPrefix(rdmaCoreModulesDir, "/"), list+".conf")) && !slices.Contains(lists, list) {
				lists = append(lists, list)
			}
		}
	}
	var live, off, differ []string
	for _, list := range lists {
		unit := "rdma-load-modules@" + list + ".service"
		isMasked := false
		for _, udir := range unitDirs[:2] { // masks live in /etc or /run
			isMasked = isMasked || masked(d.h, path.Join(udir, unit))
		}
		if isMasked {
			off = append(off, unit)
			continue
		}
		live = append(live, unit)
		if !same && !maps.Equal(d.modulesListed(path.Join(strings.TrimPrefix(dir, "/"), list+".conf")),
			d.modulesListed(path.Join(strings.TrimPrefix(rdmaCoreModulesDir, "/"), list+".conf"))) {
			differ = append(differ, list+".conf")
		}
	}
	sort.Strings(live)
	sort.Strings(off)
	sort.Strings(differ)
	if len(live) == 0 {
		if len(off) > 0 && openibd == "" {
			d.ok("coexist-rdma-load-modules", hostSubject, "rdmad loads "+dir+"/*.conf; rdma-core's "+strings.Join(off, ", ")+" masked")
		}
		if openibd == "" {
			return
		}
	}
	mask := "systemctl mask " + strings.Join(live, " ")
	switch {
	case openibd != "":
		loaders := "rdmad ([modules] enable)"
		if len(live) > 0 {
			loaders += ", rdma-core's " + strings.Join(live, ", ") + " (" + installed + ")"
		}
		fix := "give module loading one owner: with MLNX_OFED, openibd (its driver stack, loaded in its order): set [modules] enable = false"
		if len(live) > 0 {
			fix += " and " + mask
		}
		fix += "; or rdmad: systemctl disable openibd.service and set ONBOOT=no in /" + openibConf
		d.warn("coexist-rdma-load-modules", hostSubject,
			"RDMA modules are loaded by "+loaders+" and by MLNX_OFED's "+openibd+", which loads and unloads its own driver stack at boot: they can load modules of two driver stacks or in an order openibd does not expect", fix)
	case len(differ) > 0:
		d.warn("coexist-rdma-load-modules", hostSubject,
			fmt.Sprintf("two loaders with different lists: rdmad loads %s/*.conf ([modules] directory) and rdma-core's %s (%s, started by its udev rules) loads %s/*.conf; %s differ, so which modules a device gets depends on which loader ran",
				dir, strings.Join(live, ", "), installed, rdmaCoreModulesDir, strings.Join(differ, ", ")),
			"give them the same lists: set [modules] directory = \""+rdmaCoreModulesDir+"\" (or remove it), or make the lists of "+dir+" and "+rdmaCoreModulesDir+" the same; or one loader: "+mask)
	default:
		d.ok("coexist-rdma-load-modules", hostSubject,
			fmt.Sprintf("rdmad ([modules] enable) and rdma-core's %s (%s) both load the lists of %s when a device appears; loading a loaded module changes nothing, so this is harmless (one loader: %s, or [modules] enable = false)",
				strings.Join(live, ", "), installed, rdmaCoreModulesDir, mask))
	}
}

// rdmaCoreModulesDir is the directory rdma-core's loader reads, fixed in its
// unit: ExecStart=systemd-modules-load /etc/rdma/modules/%I.conf.
const rdmaCoreModulesDir = "/etc/rdma/modules"

// moduleLists are the lists rdmad (and rdma-core's udev rules) load:
// rdma.conf for any device, one per transport for the others.
var moduleLists = []string{"rdma", "infiniband", "roce", "iwarp", "opa"}

// MLNX_OFED's driver loader (github.com/Mellanox/mlnx-ofa_kernel,
// ofed_scripts/openibd and openibd.service, WantedBy=sysinit.target): at
// boot it does nothing unless /etc/infiniband/openib.conf says ONBOOT=yes,
// and then loads (and first unloads) the OFED driver stack.
const (
	openibdUnit = "openibd.service"
	openibdInit = "etc/init.d/openibd"
	openibConf  = "etc/infiniband/openib.conf"
)

// openibdLoads describes MLNX_OFED's openibd when it loads modules at boot
// ("openibd.service (/usr/lib/systemd/system/openibd.service, enabled,
// ONBOOT=yes in /etc/infiniband/openib.conf)"), "" when it does not: not
// installed, masked, not enabled, or ONBOOT is not yes.
func (d *diag) openibdLoads() string {
	file := unitFile(d.h, openibdUnit)
	if file == "" {
		for _, udir := range unitDirs[:2] {
			if masked(d.h, path.Join(udir, openibdUnit)) {
				return ""
			}
		}
		if !exists(d.h, openibdInit) { // the SysV script, run through systemd's generator
			return ""
		}
		file = openibdInit
	}
	enabled := ""
	if wants, err := boundedDir(d.h, "etc/systemd/system"); err == nil {
		for _, w := range wants {
			if strings.HasSuffix(w, ".wants") && exists(d.h, path.Join("etc/systemd/system", w, openibdUnit)) {
				enabled = "etc/systemd/system/" + w + "/" + openibdUnit
				break
			}
		}
	}
	for _, rc := range []string{"etc/rc3.d", "etc/rc5.d", "etc/rcS.d"} {
		if enabled != "" {
			break
		}
		names, _ := boundedDir(d.h, rc)
		for _, n := range names {
			if strings.HasPrefix(n, "S") && strings.HasSuffix(n, "openibd") {
				enabled = rc + "/" + n
				break
			}
		}
	}
	if enabled == "" {
		return ""
	}
	onboot := ""
	_ = boundedLines(d.h, openibConf, capConfig, func(line string) bool {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok && k == "ONBOOT" {
			onboot = strings.Trim(strings.TrimSpace(v), `"'`)
		}
		return true
	})
	if onboot != "yes" {
		return ""
	}
	return fmt.Sprintf("openibd (/%s, enabled by /%s, ONBOOT=yes in /%s)", file, enabled, openibConf)
}

// moduleListFiles is the modules directory of the policy and the lists in
// it that rdmad loads (and rdma-core's loader would): rdma.conf for any
// device, one per transport for the others.
func (d *diag) moduleListFiles() (dir string, lists []string) {
	dir = d.pol.Modules.Directory
	if dir == "" {
		dir = "/etc/rdma/modules"
	}
	for _, list := range moduleLists {
		if exists(d.h, path.Join(strings.TrimPrefix(dir, "/"), list+".conf")) {
			lists = append(lists, list)
		}
	}
	return dir, lists
}

// What the NVIDIA Network Operator, sriov-network-operator and the RDMA
// shared device plugin leave on the node, as their sources have it (read
// in November 2026; docs/decisions/doctor.md):
//
//   - NVIDIA's driver container (the Network Operator's ofedDriver, image
//     from github.com/Mellanox/doca-driver-build,
//     entrypoint/internal/config/config.go): DriverReadyPath
//     /run/mellanox/drivers/.driver-ready, created once its modules are
//     loaded and removed when it stops (the directory is the hostPath
//     run-mlnx-ofed of network-operator's
//     manifests/state-ofed-driver/0050_ofed-driver-ds.yaml), and
//     OfedBlacklistModulesFile /etc/modprobe.d/blacklist-ofed-modules.conf
//     while it loads them.
//   - github.com/k8snetworkplumbingwg/sriov-network-operator,
//     pkg/host/internal/network/network.go SetRDMASubsystem: the
//     SriovNetworkPoolConfig's rdmaMode is written as "options ib_core
//     netns_mode=0|1" to /etc/modprobe.d/sriov_network_operator_modules_config.conf
//     (removed when rdmaMode is unset); pkg/consts/constants.go: its state
//     under /etc/sriov-operator, its systemd mode's
//     /etc/systemd/system/sriov-config.service.
//   - github.com/Mellanox/k8s-rdma-shared-dev-plugin,
//     pkg/resources/resources_manager.go: resources "rdma/<resourceName>"
//     (rdmaHcaResourcePrefix), and ValidateRdmaSystemMode refuses to run in
//     netns mode exclusive. The kubelet records every registered resource
//     in /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint
//     (kubernetes pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go:
//     {"Data":{"RegisteredDevices":{"<resource>":[ids]}}}).
//   - lldpad (github.com/intel/openlldp): its socket, units, pid and
//     configuration files are package qos's (qos.CoexistLLDPad).
const (
	nvidiaDriverReady   = "run/mellanox/drivers/.driver-ready"
	nvidiaDriverLoading = "etc/modprobe.d/blacklist-ofed-modules.conf"
	sriovNetnsFile      = netns.SRIOVOperatorFile
	sriovStateDir       = "etc/sriov-operator"
	sriovConfigUnit     = "etc/systemd/system/sriov-config.service"
	kubeletCheckpoint   = "var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
	sharedDevicePrefix  = "rdma/"
)

// checkNVIDIADriver: the Network Operator's driver container loads its own
// mlx5 and RDMA modules (and reloads them when it restarts); rdmad's
// [modules] runs the host's modprobe by name, which ignores the
// container's blacklist and may load the distribution's modules.
func (d *diag) checkNVIDIADriver() {
	var seen string
	switch {
	case exists(d.h, nvidiaDriverReady):
		seen = "/" + nvidiaDriverReady
	case exists(d.h, nvidiaDriverLoading):
		seen = "/" + nvidiaDriverLoading + ", written while it loads them"
	default:
		return
	}
	who := "the NVIDIA Network Operator's driver container (DOCA-OFED) loads its own mlx5 and RDMA modules on this node (" + seen + ")"
	if !d.pol.Modules.Enable {
		d.ok("coexist-nvidia-driver", hostSubject, who+"; rdmad loads none ([modules] enable = false)")
		return
	}
	dir, lists := d.moduleListFiles()
	if len(lists) == 0 {
		d.ok("coexist-nvidia-driver", hostSubject, who+"; "+dir+" has no list for rdmad to load")
		return
	}
	files := make([]string, len(lists))
	for i, l := range lists {
		files[i] = l + ".conf"
	}
	d.warn("coexist-nvidia-driver", hostSubject,
		fmt.Sprintf("%s, and rdmad's [modules] loads %s of %s with the host's modprobe when a device appears: a load by name ignores the container's blacklist and can put the distribution's modules beside the container's",
			who, strings.Join(files, ", "), dir),
		"give module loading one owner: the driver container: set [modules] enable = false in rdmad's policy (in the DaemonSet, policy/50-kubernetes.toml); or the distribution's drivers with rdmad: remove ofedDriver from the NicClusterPolicy")
}

// checkSRIOVOperator: sriov-network-operator persists the RDMA netns mode
// of its SriovNetworkPoolConfig (rdmaMode) in modprobe.d, as rdmad does
// for [netns]; one of them should own it.
func (d *diag) checkSRIOVOperator() {
	var seen []string
	for _, p := range []string{sriovNetnsFile, sriovStateDir, sriovConfigUnit} {
		if exists(d.h, p) {
			seen = append(seen, "/"+p)
		}
	}
	if len(seen) == 0 {
		return
	}
	mode, where := config.NetnsUnmanaged, ""
	if m, n, ok := netns.FileMode(d.h, sriovNetnsFile); ok {
		mode, where = m, fmt.Sprintf("/%s:%d", sriovNetnsFile, n)
	}
	declared, src := d.netnsInForce()
	switch {
	case mode == config.NetnsUnmanaged && declared == config.NetnsUnmanaged:
		return
	case mode == config.NetnsUnmanaged:
		d.ok("coexist-sriov-operator", hostSubject,
			fmt.Sprintf("sriov-network-operator is on this node (%s) and sets no RDMA netns mode: rdmad's [netns] mode = %q (%s) owns it; keep rdmaMode out of its SriovNetworkPoolConfig",
				strings.Join(seen, ", "), declared, src))
	case declared == config.NetnsUnmanaged:
		d.ok("coexist-sriov-operator", hostSubject,
			fmt.Sprintf("sriov-network-operator sets RDMA netns mode %s (%s, its SriovNetworkPoolConfig rdmaMode); rdmad declares none ([netns])", mode, where))
	default:
		d.warn("coexist-sriov-operator", hostSubject,
			fmt.Sprintf("RDMA netns mode is set twice: by sriov-network-operator (%s at %s, its SriovNetworkPoolConfig rdmaMode, also put on the kernel command line) and by rdmad's [netns] mode = %q (%s)",
				mode, where, declared, src),
			fmt.Sprintf("give it one owner: sriov-network-operator (the pods it configures depend on it): leave [netns] mode undeclared in rdmad (%s); or rdmad: remove rdmaMode from the SriovNetworkPoolConfig", d.netnsUndeclare(src, mode)))
	}
}

// netnsOrigin is where the netns mode rdmad applies comes from: set at
// runtime over D-Bus, rdmad's own drop-in (rdmactl netns set --persist),
// or an administrator's file.
type netnsOrigin struct {
	runtime bool
	pos     config.Position // the declaring file when not runtime
}

func (o netnsOrigin) persisted() bool { return !o.runtime && config.IsPersistedFile(o.pos) }

func (o netnsOrigin) String() string {
	switch {
	case o.runtime:
		return "set at runtime with rdmactl netns set"
	case o.pos.File == "":
		return "the policy"
	case o.persisted():
		return o.pos.String() + ", written by rdmactl netns set --persist"
	}
	return o.pos.String()
}

// netnsInForce is the netns mode rdmad applies and where it comes from.
func (d *diag) netnsInForce() (config.NetnsMode, netnsOrigin) {
	if d.pol.Netns.Runtime != config.NetnsUnmanaged {
		return d.pol.Netns.Runtime, netnsOrigin{runtime: true}
	}
	return d.pol.Netns.Mode, netnsOrigin{pos: d.pol.Netns.Source}
}

// netnsUndeclare says how to leave [netns] undeclared in rdmad, given
// where its mode comes from; other is the mode the other owner sets, which
// is what rdmactl can at most align rdmad with (it has no command that
// withdraws a mode).
func (d *diag) netnsUndeclare(o netnsOrigin, other config.NetnsMode) string {
	files := ""
	if o.runtime && d.pol.Netns.Mode != config.NetnsUnmanaged {
		// The files declare a mode too: it returns when rdmad restarts.
		files = "; then " + d.netnsUndeclare(netnsOrigin{pos: d.pol.Netns.Source}, other)
	}
	switch {
	case o.runtime:
		agree := " (" + d.pol.API.Refusal() + ")"
		if d.pol.API.Allows(false) == nil {
			agree = fmt.Sprintf(", or meanwhile rdmactl netns set %s to agree", other)
		}
		return "the mode set at runtime lasts until rdmad restarts: rdmactl netns unset withdraws it" + agree + files
	case o.persisted():
		agree := " (" + d.pol.API.Refusal() + ")"
		if d.pol.API.Allows(true) == nil {
			agree = fmt.Sprintf(", or rdmactl netns set %s --persist makes them agree", other)
		}
		return fmt.Sprintf("it comes from rdmad's own drop-in %s: rdmactl netns unset --persist withdraws it", o.pos) + agree
	}
	return "remove it from " + o.pos.String()
}

// netnsSetShared says how to make rdmad's netns mode shared, given where
// its exclusive mode comes from.
func (d *diag) netnsSetShared(o netnsOrigin) string {
	switch {
	case o.runtime && d.pol.Netns.Mode == config.NetnsExclusive:
		return d.pol.API.Declaring("rdmactl netns set shared --persist (the mode set at runtime, and "+d.pol.Netns.Source.String()+" for the next boot)", true,
			"rdmactl netns unset (the mode set at runtime), and set [netns] mode = \"shared\" at "+d.pol.Netns.Source.String())
	case o.runtime:
		return d.pol.API.Declaring("rdmactl netns set shared (it was set at runtime)", false, "rdmactl netns unset (it was set at runtime)")
	case o.persisted():
		return d.pol.API.Declaring("rdmactl netns set shared --persist (rdmad's own drop-in "+o.pos.String()+" declares it)", true,
			"rdmactl netns unset --persist (rdmad's own drop-in "+o.pos.String()+" declares it)")
	}
	return fmt.Sprintf("remove [netns] from %s or set mode = \"shared\" there", o.pos)
}

// checkRDMASharedDevicePlugin: the RDMA shared device plugin hands the same
// RDMA device to many pods, which works only in netns mode shared; it
// refuses to start in exclusive mode.
func (d *diag) checkRDMASharedDevicePlugin() {
	b, err := boundedRead(d.h, kubeletCheckpoint, capIndex)
	if err != nil {
		return
	}
	var cp struct {
		Data struct {
			RegisteredDevices map[string]json.RawMessage
		}
	}
	if json.Unmarshal(b, &cp) != nil {
		return
	}
	var res []string
	for r := range cp.Data.RegisteredDevices {
		if strings.HasPrefix(r, sharedDevicePrefix) {
			res = append(res, r)
		}
	}
	if len(res) == 0 {
		return
	}
	sort.Strings(res)
	who := fmt.Sprintf("the RDMA shared device plugin serves %s on this node (/%s); it shares each RDMA device among pods, which needs netns mode shared",
		reconcile.ShortList(res, 4), kubeletCheckpoint)
	mode, src := d.netnsInForce()
	switch mode {
	case config.NetnsExclusive:
		d.warn("coexist-rdma-shared-dev-plugin", hostSubject,
			fmt.Sprintf("%s (it refuses to start in exclusive), and rdmad's [netns] mode = \"exclusive\" (%s)", who, src),
			fmt.Sprintf("let the pods' device plugin decide: with the shared device plugin, %s; for one RDMA device per pod, use the SR-IOV device plugin with sriov-network-operator's rdmaMode exclusive instead, and leave [netns] undeclared in rdmad", d.netnsSetShared(src)))
	case config.NetnsShared:
		d.ok("coexist-rdma-shared-dev-plugin", hostSubject, fmt.Sprintf("%s: rdmad declares it (%s)", who, src))
	default:
		d.ok("coexist-rdma-shared-dev-plugin", hostSubject, who+"; rdmad declares no mode ([netns])")
	}
}

// checkLLDPad: lldpad and rdmad's [[qos]] both manage DCB; the qos part
// judges it (qos.CoexistLLDPad) from what doctor sees of lldpad's socket
// and units.
func (d *diag) checkLLDPad() {
	unit := ""
	if d.unixSocketListening(qos.LLDPadSocket) {
		for _, u := range qos.LLDPadUnits {
			if unit = unitFile(d.h, u); unit != "" {
				break
			}
		}
	}
	if n, ok := qos.CoexistLLDPad(d.h, d.pol, unit); ok {
		d.note(n)
	}
}

// unixSocketListening reports whether a Unix socket bound to name (an
// abstract one starts with @) is in /proc/net/unix (the network namespace
// rdmad runs in; abstract sockets belong to one).
func (d *diag) unixSocketListening(name string) bool {
	found := false
	_ = boundedLines(d.h, "proc/net/unix", capIndex, func(line string) bool {
		f := strings.Fields(line)
		if len(f) >= 8 && f[len(f)-1] == name {
			found = true
			return false
		}
		return true
	})
	return found
}
