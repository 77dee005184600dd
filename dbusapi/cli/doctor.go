package cli

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"text/tabwriter"

	"github.com/rdmad/rdmad/dbusapi/client"
)

// Check is one doctor finding.
type Check struct {
	Target string `json:"target"`
	Check  string `json:"check"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

var errDoctorFailed = errors.New("some checks failed")

// Diagnose runs the checks on a snapshot read over the bus and on what
// rdmactl sees of this host itself (local).
func Diagnose(s *client.Snapshot, local Local) []Check {
	var out []Check
	add := func(target, check string, ok bool, detail string) {
		out = append(out, Check{Target: target, Check: check, OK: ok, Detail: detail})
	}
	add("rdmad", "configuration loads", s.Manager.ConfigError == "", s.Manager.ConfigError)
	add("rdmad", "last reconcile succeeded", s.Manager.LastResult == "ok", s.Manager.LastResult)
	add("host", "RDMA devices present", len(s.Devices) > 0, fmt.Sprintf("%d devices", len(s.Devices)))
	// ib_uverbs gives user space (libibverbs) access to the devices.
	uverbs := local.UverbsLoaded || slices.Contains(s.Manager.Modules, "ib_uverbs")
	add("host", "ib_uverbs loaded", uverbs || len(s.Devices) == 0, "/dev/infiniband/uverbs* needs it for libibverbs")
	out = append(out, local.memlockChecks()...)
	out = append(out, local.nfsChecks()...)
	for _, d := range s.Devices {
		if d.Error != "" {
			add(d.Name, "policy applied", false, d.Error)
		}
		for _, p := range d.Ports {
			t := fmt.Sprintf("%s/%d", d.Name, p.Number)
			add(t, "port ACTIVE", p.State == "ACTIVE", fmt.Sprintf("state %s, physical_state %s", dash(p.State), dash(p.PhysState)))
			if p.Transport == "infiniband" {
				add(t, "subnet manager present", lidSet(p.SMLID), "sm_lid "+dash(p.SMLID))
			}
			applied := p.Error == ""
			detail := p.Error
			if applied && p.DesiredRoCEMode != "" && kernelMode(p.DesiredRoCEMode) != p.RoCEMode {
				applied, detail = false, fmt.Sprintf("roce_mode %q, declared %s", p.RoCEMode, p.DesiredRoCEMode)
			}
			if applied && p.DesiredRoCETOS >= 0 && p.DesiredRoCETOS != p.RoCETOS {
				applied, detail = false, fmt.Sprintf("tos %s, declared %d", tosString(p.RoCETOS), p.DesiredRoCETOS)
			}
			add(t, "policy applied", applied, detail)
		}
	}
	return out
}

// lidSet reports whether a sysfs LID ("0x0001") names a port: 0 means the
// subnet manager has not assigned one.
func lidSet(s string) bool {
	v, err := strconv.ParseUint(s, 0, 16)
	return err == nil && v != 0
}

func kernelMode(m string) string {
	switch m {
	case "v1":
		return "IB/RoCE v1"
	case "v2":
		return "RoCE v2"
	}
	return m
}

func (e *env) doctor() error {
	s, err := e.snapshot()
	if err != nil {
		return err
	}
	checks := Diagnose(s, ProbeLocal("/"))
	failed := 0
	for _, c := range checks {
		if !c.OK {
			failed++
		}
	}
	if e.json {
		if err := e.printJSON(checks); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		for _, c := range checks {
			mark := "ok"
			if !c.OK {
				mark = "FAIL"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", mark, c.Target, c.Check, c.Detail)
		}
		tw.Flush()
	}
	if failed > 0 {
		return fmt.Errorf("doctor: %d of %d checks failed: %w", failed, len(checks), errDoctorFailed)
	}
	return nil
}
