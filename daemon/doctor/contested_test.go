package doctor_test

import (
	"errors"
	"testing"

	"github.com/rdmad/rdmad/daemon/dcb/dcbtest"
	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/qos"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// A setting rdmad stopped correcting because another manager keeps
// changing it is a fail setting-contested naming the setting, and the
// other manager where a part's checks know it (lldpad for DCB).
func TestContestedSettingNamesTheOtherManager(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	pol := parsePolicy(t, "[[qos]]\ndevice = \"mlx5_0\"\nport = 1\npfc = [3]\n")
	k := dcbtest.New()
	k.Add("ens1f0np0")
	contest := func(in *doctor.Input) {
		for i := range in.State.Devices {
			for j := range in.State.Devices[i].Ports {
				recs := in.State.Devices[i].Ports[j].Records
				for n := range recs {
					if recs[n].Setting == qos.PFC.Setting() {
						recs[n].State, recs[n].Why = reconcile.Contested, errors.New("another manager keeps changing it")
					}
				}
			}
		}
	}
	diagnoseContested := func() []doctor.Finding {
		return diagnose(t, root, withPolicy(pol), withDCB(k), func(in *doctor.Input) {
			in.State, in.Checks = observe(in.Host, pol, k.Kernel(), noNetlink{})
			contest(in)
		})
	}
	mustFix(t, diagnoseContested(), "setting-contested", "mlx5_0/1", doctor.SeverityFail,
		"mlx5_0/1: PFC is [], declared [3] at /etc/rdma/rdmad.toml:1: another manager keeps changing it",
		"hand the setting to one manager (what else writes PFC of mlx5_0/1, or rdmad)")
	hosttest.Write(t, root, "run/lldpad.pid", "4242\n")
	hosttest.Write(t, root, "proc/4242/comm", "lldpad\n")
	mustFix(t, diagnoseContested(), "setting-contested", "mlx5_0/1", doctor.SeverityFail,
		"another manager keeps changing it; lldpad (pid 4242) also manages it",
		"hand the setting to one manager (lldpad (pid 4242), or rdmad)")
}
