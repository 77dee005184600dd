package netns

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/initramfs"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// SRIOVOperatorFile is the modprobe.d file sriov-network-operator writes
// the mode of its SriovNetworkPoolConfig rdmaMode to (and rewrites).
const SRIOVOperatorFile = "etc/modprobe.d/sriov_network_operator_modules_config.conf"

// modprobeDirs are modprobe.d's directories, in the order modprobe merges
// them (a name in an earlier one hides the same name in later ones).
var modprobeDirs = []string{"etc/modprobe.d", "run/modprobe.d", "usr/local/lib/modprobe.d", "usr/lib/modprobe.d", "lib/modprobe.d"}

// Boot is where ib_core's RDMA netns mode at its next load comes from.
type Boot struct {
	Mode    config.NetnsMode
	Where   string // for the operator: "/file:line", the command line, the default
	File    string // the modprobe.d file that decides (relative to the root), "" when none does
	Cmdline bool   // the kernel command line decides
}

// BootMode is the mode ib_core starts in at its next load: the last
// "options ib_core netns_mode=" of modprobe.d (files by name, /etc
// first), then ib_core.netns_mode= on the kernel command line; shared by
// default. Reads are bounded.
func BootMode(h *host.Host) Boot {
	b := Boot{Mode: config.NetnsShared, Where: "ib_core's default"}
	for _, f := range modprobeFiles(h) {
		if m, n, ok := FileMode(h, f); ok {
			b = Boot{Mode: m, Where: fmt.Sprintf("/%s:%d", f, n), File: f}
		}
	}
	if cmdline, err := host.ReadAttr(h.Path("proc/cmdline")); err == nil {
		for _, opt := range strings.Fields(string(cmdline)) {
			if v, ok := strings.CutPrefix(host.NormalizeModule(opt), "ib_core.netns_mode="); ok {
				if m, ok := paramMode(v); ok {
					b = Boot{Mode: m, Where: "ib_core.netns_mode= on the kernel command line", Cmdline: true}
				}
			}
		}
	}
	return b
}

// FileMode is the mode one modprobe.d file gives ib_core, and the line
// that says it (the last one); ok false when the file sets none.
func FileMode(h *host.Host, rel string) (mode config.NetnsMode, line int, ok bool) {
	data, err := h.ReadFile(rel)
	if err != nil {
		return "", 0, false
	}
	for n, l := range strings.Split(string(data), "\n") {
		if m, found := optionMode(l); found {
			mode, line, ok = m, n+1, true
		}
	}
	return mode, line, ok
}

// modprobeFiles lists modprobe.d's *.conf files as modprobe merges them.
func modprobeFiles(h *host.Host) []string {
	seen := map[string]string{}
	for _, dir := range modprobeDirs {
		names, err := h.ReadDirNames(dir)
		if err != nil {
			continue
		}
		for _, n := range names {
			if _, dup := seen[n]; !dup && strings.HasSuffix(n, ".conf") && !strings.HasPrefix(n, ".") {
				seen[n] = path.Join(dir, n)
			}
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = seen[n]
	}
	return out
}

// optionMode reads the mode a modprobe.d line gives ib_core ("options
// ib_core ... netns_mode=0 ..."; the last one on the line wins).
func optionMode(line string) (config.NetnsMode, bool) {
	fl := strings.Fields(line)
	if len(fl) < 3 || fl[0] != "options" || host.NormalizeModule(fl[1]) != "ib_core" {
		return "", false
	}
	var mode config.NetnsMode
	found := false
	for _, opt := range fl[2:] {
		if v, ok := strings.CutPrefix(opt, "netns_mode="); ok {
			if m, ok := paramMode(v); ok {
				mode, found = m, true
			}
		}
	}
	return mode, found
}

// paramMode reads ib_core's bool parameter netns_mode (1 = shared).
func paramMode(v string) (config.NetnsMode, bool) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "y", "yes", "on", "true":
		return config.NetnsShared, true
	case "0", "n", "no", "off", "false":
		return config.NetnsExclusive, true
	}
	return "", false
}

// running is the running kernel's mode. ib_core exports netns_mode
// read-only in sysfs, and `rdma system set netns` changes the variable
// behind it, so the file tells the running mode; RDMA netlink is asked
// only when the file is not there, and never without ib_core (opening it
// would load ib_core). known is false when nothing tells.
func (p *Part) running() (mode config.NetnsMode, known, loaded bool) {
	mods, err := p.Host.LoadedModules()
	if err != nil || !mods["ib_core"] {
		return "", false, false
	}
	if v, err := host.ReadAttr(p.Host.Path("sys/module/ib_core/parameters/netns_mode")); err == nil {
		if m, ok := paramMode(string(v)); ok {
			return m, true, true
		}
	}
	if p.Kernel != nil {
		if m, err := p.Kernel.Mode(); err == nil && m != config.NetnsUnmanaged {
			return m, true, true
		}
	}
	return "", false, true
}

// Check implements reconcile.Checker: where the RDMA netns mode the host
// runs comes from and what the next boot gives ib_core. Whether the
// declared mode holds in the running kernel and in rdmad's modprobe.d
// file is in the records; this says what they cannot: a mode switched by
// hand that a reboot loses, another file or the kernel command line
// that overrides the declared boot mode, and an initramfs older than the
// file that gives the boot mode.
func (p *Part) Check(_ context.Context, in *reconcile.CheckInput) []reconcile.Note {
	boot := BootMode(p.Host)
	notes := p.checkMode(in, boot)
	if n, stale := p.checkInitramfs(boot); stale {
		notes = append(notes, n)
	}
	return notes
}

// checkMode judges the running mode and the next boot's against the
// declared one.
func (p *Part) checkMode(in *reconcile.CheckInput, boot Boot) []reconcile.Note {
	pol := in.Policy.Netns
	declared, inForce := pol.Mode, pol.InForce()
	running, known, loaded := p.running()
	runningText := string(running)
	switch {
	case !known && !loaded:
		runningText = "unknown (ib_core not loaded)"
	case !known:
		runningText = "unknown"
	}
	hostS := reconcile.HostSubject()
	note := func(sev reconcile.Severity, id, finding, fix string) []reconcile.Note {
		return []reconcile.Note{{ID: id, Subject: hostS, Severity: sev, Finding: finding, Fix: fix}}
	}
	switch {
	case inForce == config.NetnsUnmanaged && known && running != boot.Mode:
		return note(reconcile.SeverityWarn, "netns-not-persistent",
			fmt.Sprintf("RDMA netns mode is %s, but ib_core starts %s at the next boot (%s): the change is lost at reboot", running, boot.Mode, boot.Where),
			in.Policy.API.Declaring(fmt.Sprintf(`rdmactl netns set %s --persist ([netns] mode = "%s" in /etc/rdma/rdmad.toml)`, running, running), true,
				fmt.Sprintf(`declare [netns] mode = "%s" in /etc/rdma/rdmad.toml`, running)))
	case inForce == config.NetnsUnmanaged:
		return note(reconcile.SeverityOK, "netns-mode", fmt.Sprintf("RDMA netns mode %s, not declared (at boot: %s, %s)", runningText, boot.Mode, boot.Where), "")
	case declared != config.NetnsUnmanaged && boot.Mode != declared:
		fix := "rdmactl reconcile (rdmad writes /" + ModprobeFile + "), and see rdmactl status"
		switch {
		case boot.File == SRIOVOperatorFile:
			fix = fmt.Sprintf("%s is sriov-network-operator's (its SriovNetworkPoolConfig rdmaMode; it rewrites the file): remove rdmaMode there, or leave [netns] mode undeclared in rdmad (see coexist-sriov-operator)", boot.Where)
		case boot.File != "" && boot.File != ModprobeFile:
			fix = fmt.Sprintf("remove netns_mode from %s: it is read after /%s", boot.Where, ModprobeFile)
		case boot.Cmdline:
			fix = "remove ib_core.netns_mode= from the kernel command line"
		}
		return note(reconcile.SeverityFail, "netns-boot-differs",
			fmt.Sprintf("[netns] mode = %q is declared, but ib_core starts %s at the next boot (%s)", declared, boot.Mode, boot.Where), fix)
	case known && running != inForce:
		return nil // the running mode's record says it does not hold, and why
	case inForce != declared:
		return note(reconcile.SeverityOK, "netns-mode", fmt.Sprintf("RDMA netns mode %s, set at runtime without persist (at boot: %s, %s)", runningText, boot.Mode, boot.Where), "")
	case !known:
		return note(reconcile.SeverityOK, "netns-mode", fmt.Sprintf("RDMA netns mode %s declared, ib_core starts in it at boot (%s); running mode %s", declared, boot.Where, runningText), "")
	}
	return note(reconcile.SeverityOK, "netns-mode", fmt.Sprintf("RDMA netns mode %s as declared, at boot too (%s)", running, boot.Where), "")
}

// checkInitramfs: ib_core reads the modprobe.d file that gives its mode
// at boot when it loads, so where ib_core loads from the initramfs (its
// generator's configuration lists ib_core, a driver that needs it, or
// dracut's rdma module), an image built before the file changed starts
// the next boot in the old mode (netns-initramfs-stale).
func (p *Part) checkInitramfs(boot Boot) (reconcile.Note, bool) {
	if boot.File == "" {
		return reconcile.Note{}, false
	}
	b := initramfs.Read(p.Host, boot.File, initramfs.Module{Brings: initramfs.Needing(p.Host, "ib_core"), RDMADracutModule: true})
	if !b.Stale {
		return reconcile.Note{}, false
	}
	return reconcile.Note{ID: "netns-initramfs-stale", Subject: reconcile.HostSubject(), Severity: reconcile.SeverityWarn,
		Finding: fmt.Sprintf("ib_core loads from the initramfs (%s), and /%s was built before /%s changed: the next boot starts ib_core in the old RDMA netns mode", b.From, b.Image, boot.File),
		Fix:     b.Rebuild}, true
}

// OtherManager implements reconcile.Contender: sriov-network-operator,
// when its modprobe.d file sets a mode.
func (p *Part) OtherManager(in *reconcile.CheckInput, r reconcile.Record) string {
	if r.Setting != Mode.Setting() {
		return ""
	}
	if _, n, ok := FileMode(in.Host, SRIOVOperatorFile); ok {
		return fmt.Sprintf("sriov-network-operator (its rdmaMode, /%s:%d)", SRIOVOperatorFile, n)
	}
	return ""
}
