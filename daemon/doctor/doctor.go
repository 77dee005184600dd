// Package doctor answers org.rdmad1.Manager.Diagnose: is this host's RDMA
// usable, and if not, what exactly to do about it. It checks what the
// operator guides end with (ibstat, ibv_devinfo, ulimit -l, rdma link, the
// subnet manager, /etc/nfs.conf...) on the host as rdmad sees it, under its
// --root like everything else, and returns one Finding per thing checked:
// an id, a subject, ok/warn/fail, one line, and the fix.
//
// Doctor only reads. Every file goes through host's bounded reader (read.go);
// what is not a file (the running RDMA netns mode) comes through a small
// interface that may be nil.
package doctor

import (
	"context"
	"errors"
	"sort"
	"strings"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/health"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// PortRef names a port of a device; Port 0 is the device itself.
type PortRef struct {
	Device string
	Port   int
}

// Input is what Diagnose looks at.
type Input struct {
	Host *host.Host
	// Policy is the policy in force (the last good one when the files do
	// not load). nil is a policy that declares nothing.
	Policy *config.Policy
	// Devices are the observed devices; nil makes doctor read them.
	Devices []host.Device
	// Errors are the last reconcile's errors by port (optional). Doctor
	// does not repeat them as findings of their own (rdmactl status shows
	// them); it quotes one where it explains a finding, e.g. why a
	// declared RoCE mode is not the kernel's.
	Errors map[PortRef]string
	// ConfigError is the error of the last reload, nil when the files on
	// disk are in force.
	ConfigError error
	// Health is what the running daemon observed over time: error
	// counters, carrier losses, since when each link is up (nil: no
	// history; counters and flaps are not judged, and a port without a
	// subnet manager fails at once, with no grace).
	Health *health.View
	// Addrs lists the addresses of a netdev, for its RoCE v2 GIDs (nil:
	// not checked).
	Addrs AddrReader
	// InForce says which policy a running rdmad applies and how its saved
	// last good configuration stands (zero outside a running rdmad).
	InForce config.InForce
	// State is the observed state with every setting's record (nil: no
	// setting is judged). Devices, when nil, come from it.
	State *reconcile.State
	// Checks are the parts' own checks (reconcile.Checker), run on State.
	Checks []reconcile.Checker
}

// Diagnose runs every check and returns the findings in a fixed order:
// configuration, devices and ports (with what [[expect]] declares), the
// PCIe links, error counters and flaps, RoCE, rules that select nothing,
// user-space access, memlock, NFS over RDMA, IPoIB, netns, other managers
// of the same settings. A warn or fail finding that [doctor] ignore names
// is then "ignored". It never fails: what it cannot read becomes a
// finding or is skipped, and a cancelled ctx ends it with what it has.
func Diagnose(ctx context.Context, in Input) []Finding {
	d := &diag{in: in, h: in.Host, pol: in.Policy, unjudged: map[PortRef]bool{}}
	if d.pol == nil {
		d.pol = declaresNothing()
	}
	if d.h == nil {
		d.h = host.New("/")
	}
	d.devs = in.Devices
	if d.devs == nil && in.State != nil {
		d.devs = make([]host.Device, 0, len(in.State.Devices))
		for i := range in.State.Devices {
			d.devs = append(d.devs, in.State.Devices[i].Device)
		}
	}
	if d.devs == nil {
		devs, err := d.h.Devices()
		d.devs = devs
		if err != nil {
			d.fail("devices-unreadable", hostSubject, "reading /"+host.ClassInfiniband+": "+err.Error(),
				"check the kernel log (journalctl -k) for the RDMA driver")
		}
	}
	sort.Slice(d.devs, func(i, j int) bool { return d.devs[i].Name < d.devs[j].Name })
	for _, check := range []func(){
		d.checkConfig,
		d.checkOverrides,
		d.checkLinks,
		d.checkPorts,
		d.checkPCIe,
		d.checkCounters,
		d.checkSettings,
		d.checkRoCENetdevs,
		d.checkRules,
		d.checkExpectRules,
		d.checkVerbs,
		d.checkModuleLists,
		d.checkProviders,
		d.checkMemlock,
		d.checkNFS,
		d.checkIPoIB,
		func() { d.checkParts(ctx) },
		d.checkCoexistence,
	} {
		if ctx.Err() != nil {
			break
		}
		check()
	}
	d.applyIgnore()
	return d.out
}

// diag is one run of Diagnose.
type diag struct {
	in   Input
	h    *host.Host
	pol  *config.Policy
	devs []host.Device
	out  []Finding
	// unjudged are the ports an [[expect]] rule declares unused: no
	// finding is made about them but the one that says so.
	unjudged map[PortRef]bool

	loaded  map[string]bool // cached LoadedModules
	modDeps map[string][]string
	distro  *osRelease
}

// declaresNothing is the policy of a host without configuration files:
// config's defaults ([modules] enable = true...), nothing else.
func declaresNothing() *config.Policy {
	p, err := config.Parse("(none)", nil)
	if err != nil { // cannot happen: empty input is valid; keep doctor running anyway
		return &config.Policy{}
	}
	p.Files = nil
	return p
}

var (
	hostSubject   = reconcile.HostSubject()
	portSubject   = reconcile.PortSubject
	deviceSubject = reconcile.DeviceSubject
	linkSubject   = reconcile.LinkSubject
	netdevSubject = reconcile.NetdevSubject
)

// add records a finding.
func (d *diag) add(sev Severity, id string, s reconcile.Subject, finding, fix string) {
	d.out = append(d.out, Finding{ID: id, Subject: s, Severity: sev, Finding: finding, Fix: fix, Scope: scopeOf(id)})
}

func (d *diag) ok(id string, s reconcile.Subject, finding string) {
	d.add(SeverityOK, id, s, finding, "")
}

func (d *diag) warn(id string, s reconcile.Subject, finding, fix string) {
	d.add(SeverityWarn, id, s, finding, fix)
}

func (d *diag) fail(id string, s reconcile.Subject, finding, fix string) {
	d.add(SeverityFail, id, s, finding, fix)
}

// loadedModules is the kernel's module set, read once per run.
func (d *diag) loadedModules() map[string]bool {
	if d.loaded == nil {
		m, err := d.h.LoadedModules()
		if err != nil {
			m = map[string]bool{}
		}
		d.loaded = m
	}
	return d.loaded
}

// missingModules are the names the kernel lacks, aliases resolved as
// modprobe does (svcrdma is rpcrdma); all of them when that cannot be told.
func (d *diag) missingModules(names ...string) []string {
	missing, err := d.h.MissingModules(names)
	if err != nil {
		return names
	}
	return missing
}

func (d *diag) checkConfig() {
	d.checkLastGood()
	if err := d.in.ConfigError; err != nil {
		msg := strings.ReplaceAll(err.Error(), "\n", "; ")
		applies := "rdmad applies the last one that loaded (nothing declared if none ever did)"
		switch in := d.in.InForce; in.Origin {
		case config.OriginLastGood:
			applies = "rdmad applies " + in.Describe() + " (" + strings.Join(in.Files, ", ") + ")"
		case config.OriginNothing:
			applies = "nothing declared is in force: no last good configuration can be used"
		}
		d.fail("config-error", hostSubject, "the configuration does not load; "+applies+": "+msg,
			"correct the file and line named, then: rdmactl reload")
		return
	}
	files := "no configuration file, nothing declared"
	if len(d.pol.Files) > 0 {
		files = strings.Join(d.pol.Files, ", ")
	}
	d.ok("config-loaded", hostSubject, "configuration in force: "+files)
}

// checkLastGood reports what stands in the way of rdmad's safety net, the
// saved copy of the last configuration that loaded: without it the next
// boot whose files do not load applies nothing.
func (d *diag) checkLastGood() {
	in := d.in.InForce
	what := in.LastGoodError()
	if what == "" {
		return
	}
	fix := "correct the configuration files: once they load, rdmad saves a new copy"
	switch {
	case errors.Is(in.SaveError, host.ErrNotManaged):
		fix = "move the file named away (rdmad never replaces a file it did not write); rdmad saves its copy after the next pass"
	case in.SaveError != nil:
		fix = "make /var/lib/rdmad writable (space, permissions); rdmad tries again after every pass"
	}
	d.warn("last-good", hostSubject, "the last good configuration, applied when the files do not load at start: "+what, fix)
}
