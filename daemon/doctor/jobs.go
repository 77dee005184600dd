package doctor

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rdmad/rdmad/daemon/config"
)

// jobServices are the services that start RDMA jobs: a job inherits the
// service's RLIMIT_MEMLOCK (slurmd caps what PropagateResourceLimits
// passes on at its own hard limit; pbs_mom forks jobs with its limits),
// so limits.conf, which applies to logins, does not reach them.
var jobServices = []string{"slurmd.service", "pbs_mom.service"}

// checkJobServiceMemlock: the memlock limit of slurmd, pbs_mom and the
// units of [memlock] check_units, from their LimitMEMLOCK= as systemd
// resolves it (unit file, drop-ins, DefaultLimitMEMLOCK=).
func (d *diag) checkJobServiceMemlock(m *config.Memlock, services sourcedLimit) {
	units := append([]string{}, jobServices...)
	for _, u := range d.pol.MemlockCheckUnits.Names {
		if !slices.Contains(units, u) {
			units = append(units, u)
		}
	}
	listed := func(u string) bool { return slices.Contains(d.pol.MemlockCheckUnits.Names, u) }
	for _, unit := range units {
		lim, found := d.unitMemlock(unit, services)
		name := strings.TrimSuffix(unit, ".service")
		if !found {
			if listed(unit) {
				d.warn("memlock-job-service-missing", hostSubject,
					fmt.Sprintf("%s, listed in [memlock] check_units at %s, is not installed (or is masked): its memlock limit cannot be checked", unit, d.pol.MemlockCheckUnits.Source),
					"correct the unit's name in check_units at "+d.pol.MemlockCheckUnits.Source.String())
			}
			continue
		}
		got := fmt.Sprintf("%s and the jobs it starts get memlock %s (%s)", name, formatLimit(lim.soft), lim.source)
		low := false
		switch {
		case m != nil:
			low = limitLess(lim.soft, m.Soft)
		default:
			low = !lim.explicit && !lim.soft.Unlimited
		}
		if !low {
			d.ok("memlock-job-service", hostSubject, got)
			continue
		}
		want, sev := "infinity", "warn"
		if m != nil {
			want, sev = m.Soft.Systemd(), "fail"
			got += ", below the declared " + formatLimit(m.Soft)
		} else {
			got += ": RDMA jobs cannot register more memory than that"
		}
		fix := fmt.Sprintf("systemctl edit %s, add [Service] LimitMEMLOCK=%s, then systemctl restart %s", unit, want, name)
		if sev == "fail" {
			d.fail("memlock-job-service-low", hostSubject, got, fix)
		} else {
			d.warn("memlock-job-service-low", hostSubject, got, fix)
		}
	}
}
