package roce

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// Check implements reconcile.Checker: configfs rdma_cm must be there for
// declared RoCE settings to apply, and the RoCE ports of a host should
// agree on a mode (an RDMA-CM client in RoCE v2 cannot reach a server in
// RoCE v1). Whether each declared setting holds is in the records.
func (p *Part) Check(_ context.Context, in *reconcile.CheckInput) []reconcile.Note {
	var notes []reconcile.Note
	type rocePort struct {
		name     string
		mode     ModeValue
		known    bool
		declared bool
		gids     []string
	}
	var ports []rocePort
	var unreachable []string
	tosPorts := map[TOSValue][]string{} // declared TOS -> ports
	for i := range in.State.Devices {
		ds := &in.State.Devices[i]
		for _, ps := range ds.Ports {
			if ps.Transport != host.TransportRoCE {
				continue
			}
			rp := rocePort{name: reconcile.PortSubject(ds.Name, ps.Number).String(), gids: ps.GIDTypes}
			declared := false
			for _, r := range ps.Records {
				if Mode.Is(r) || TOS.Is(r) {
					declared = declared || r.IsDeclared()
				}
				if m, ok := Mode.Observed(r); ok {
					rp.mode, rp.known = m, true
				}
				if Mode.Is(r) && r.IsDeclared() {
					rp.declared = true
				}
				if t, ok := TOS.Declared(r); ok && r.Applies() {
					tosPorts[t] = append(tosPorts[t], reconcile.PortSubject(ds.Name, ps.Number).String())
				}
			}
			ports = append(ports, rp)
			if declared && !p.Host.Exists(host.ConfigfsRdmaCM) {
				unreachable = append(unreachable, rp.name)
			}
		}
	}
	if n, ok := tosScope(tosPorts); ok {
		notes = append(notes, n)
	}
	if len(unreachable) > 0 {
		problem, fix := p.configfsProblem()
		notes = append(notes, reconcile.Note{ID: "roce-configfs-missing", Subject: reconcile.HostSubject(), Severity: reconcile.SeverityFail,
			Finding: "RoCE policy declared for " + strings.Join(unreachable, " ") + " cannot apply: " + problem, Fix: fix})
	}
	// Mixed modes (v1 and v2 are different encapsulations: a RoCE v2
	// client cannot reach a v1 server). A mix the policy declares port by
	// port is the operator's choice; one that comes from kernel defaults
	// is worth a warning.
	var v1, v2, canV1 []string
	undeclared := false
	for _, rp := range ports {
		if !rp.known {
			continue
		}
		switch rp.mode.Mode {
		case config.RoCEv1:
			v1 = append(v1, rp.name)
		case config.RoCEv2:
			v2 = append(v2, rp.name)
			if slices.Contains(rp.gids, config.RoCEv1.Kernel()) {
				canV1 = append(canV1, rp.name)
			}
		default:
			continue
		}
		undeclared = undeclared || !rp.declared
	}
	if len(v1) == 0 || len(v2) == 0 || !undeclared {
		return notes
	}
	fix := "no port can change: keep RoCE v1 and v2 ports on separate networks"
	if len(canV1) > 0 {
		cmds := make([]string, len(canV1))
		for i, p := range canV1 {
			cmds[i] = "rdmactl roce set " + p + " --mode v1 --persist"
		}
		fix = in.Policy.API.Declaring("run RoCE v1 on the ports that can (or declare it in a [[roce]] rule): "+strings.Join(cmds, "; "), true,
			"declare RoCE v1 in a [[roce]] rule (mode = \"v1\") for the ports that can: "+strings.Join(canV1, " "))
	}
	return append(notes, reconcile.Note{ID: "roce-modes-mixed", Subject: reconcile.HostSubject(), Severity: reconcile.SeverityWarn,
		Finding: fmt.Sprintf("RoCE ports use different modes: %s on %s, %s on %s; an RDMA-CM client in RoCE v2 cannot connect to a server in RoCE v1",
			config.RoCEv1.Kernel(), strings.Join(v1, " "), config.RoCEv2.Kernel(), strings.Join(v2, " ")),
		Fix: fix})
}

// configfsProblem says why configfs rdma_cm is missing, and the fix.
func (p *Part) configfsProblem() (problem, fix string) {
	if !p.configfsMounted() {
		return "configfs is not mounted on /sys/kernel/config", "mount -t configfs none /sys/kernel/config (systemctl start sys-kernel-config.mount)"
	}
	return "configfs has no rdma_cm directory (module rdma_cm not loaded)", "modprobe rdma_cm"
}

// configfsMounted: /proc/mounts says so, or (a tree without it) the
// mount point has entries, which only a mounted configfs has.
func (p *Part) configfsMounted() bool {
	if mounts, err := host.ReadFileLimit(p.Host.Path("proc/mounts"), host.MaxIndexSize); err == nil {
		for _, line := range strings.Split(string(mounts), "\n") {
			f := strings.Fields(line)
			if len(f) >= 3 && f[2] == "configfs" && f[1] == "/sys/kernel/config" {
				return true
			}
		}
		return false
	}
	names, err := p.Host.ReadDirNames("sys/kernel/config")
	return err == nil && len(names) > 0
}

// tosScope says what a declared TOS reaches: default_roce_tos is the
// traffic class of RDMA-CM connections only. Verbs programs that build
// their own queue pairs, UCX and NCCL choose theirs: the same class must
// be given to them, or their traffic misses the lossless priority.
func tosScope(tos map[TOSValue][]string) (reconcile.Note, bool) {
	if len(tos) == 0 {
		return reconcile.Note{}, false
	}
	values := make([]TOSValue, 0, len(tos))
	for v := range tos {
		values = append(values, v)
	}
	slices.Sort(values)
	var parts, env []string
	for _, v := range values {
		parts = append(parts, fmt.Sprintf("TOS %d on %s", v, strings.Join(tos[v], " ")))
		env = append(env, fmt.Sprintf("UCX_IB_TRAFFIC_CLASS=%d NCCL_IB_TC=%d", v, v))
	}
	return reconcile.Note{ID: "roce-tos-scope", Subject: reconcile.HostSubject(), Severity: reconcile.SeverityOK,
		Finding: "the declared " + strings.Join(parts, "; ") + " is " + tosFile + ": it applies to RDMA-CM connections only; verbs programs that set up their own queue pairs, UCX and NCCL set their own traffic class (" + strings.Join(env, "; ") + ", or the program's option)"}, true
}
