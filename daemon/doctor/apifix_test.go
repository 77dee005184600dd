package doctor_test

import (
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/dcb/dcbtest"
	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// restricted is pol with [api] changes set as a site file would.
func restricted(pol *config.Policy, changes config.APIChanges) *config.Policy {
	pol.API = config.API{Changes: changes, Source: config.Position{File: "/etc/rdma/rdmad.d/10-site.toml", Line: 2}}
	return pol
}

// A fix never tells an operator to run an rdmactl command the host's
// [api] changes refuses: under "runtime" no declaration with --persist,
// under "none" no declaration at all; the same declaration in a file is
// offered instead, and the file that forbids the command is named.
func TestFixesOfferOnlyWhatTheAPIAllows(t *testing.T) {
	declares := func(fix string, persist bool) bool {
		for _, cmd := range []string{"roce set", "qos set", "link add", "netns set"} {
			for _, part := range strings.Split(fix, "rdmactl "+cmd)[1:] {
				// The command runs to the end of its clause.
				clause, _, _ := strings.Cut(part, ";")
				clause, _, _ = strings.Cut(clause, ")")
				if !persist || strings.Contains(clause, "--persist") {
					return true
				}
			}
		}
		return false
	}
	type tc struct {
		name, id, subject string
		fs                func(pol func(*config.Policy) *config.Policy) []doctor.Finding
		inFile            string // in the fix when the command is refused
	}
	cases := []tc{
		{"no device", "no-device", "host", func(p func(*config.Policy) *config.Policy) []doctor.Finding {
			root := hosttest.Copy(t, "rxe-ready")
			remove(t, root, "sys/class/infiniband")
			return diagnose(t, root, withPolicy(p(policyOf(t, root))))
		}, `[[link]] name = "rxe0"`},
		{"mixed RoCE modes", "roce-modes-mixed", "host", func(p func(*config.Policy) *config.Policy) []doctor.Finding {
			root := hosttest.Copy(t, "mlx5")
			hosttest.Write(t, root, "sys/kernel/config/rdma_cm/mlx5_1/ports/1/default_roce_mode", "IB/RoCE v1\n")
			return diagnose(t, root, withPolicy(p(policyOf(t, root))))
		}, `[[roce]] rule (mode = "v1") for the ports that can: mlx5_0/1`},
		{"netns switched by hand", "netns-not-persistent", "host", func(p func(*config.Policy) *config.Policy) []doctor.Finding {
			root := hosttest.Copy(t, "rxe-ready")
			hosttest.Write(t, root, "sys/module/ib_core/parameters/netns_mode", "N\n")
			return diagnose(t, root, withPolicy(p(policyOf(t, root))))
		}, `declare [netns] mode = "exclusive" in /etc/rdma/rdmad.toml`},
		{"netns in rdmad's drop-in against the shared device plugin", "coexist-rdma-shared-dev-plugin", "host", func(p func(*config.Policy) *config.Policy) []doctor.Finding {
			root := withCoexist(t, "rdma-shared-dev-plugin")
			return diagnose(t, root, withPolicy(p(persistedNetns(t, "exclusive"))))
		}, "rdmactl netns unset --persist"},
		{"netns in rdmad's drop-in against sriov-network-operator", "coexist-sriov-operator", "host", func(p func(*config.Policy) *config.Policy) []doctor.Finding {
			root := withCoexist(t, "sriov-operator")
			return diagnose(t, root, withPolicy(p(persistedNetns(t, "shared"))))
		}, "rdmactl netns unset --persist withdraws it"},
		{"RoCE traffic lossy", "roce-lossless", "mlx5_0/1", func(p func(*config.Policy) *config.Policy) []doctor.Finding {
			root := hosttest.Copy(t, "mlx5")
			k := dcbtest.New()
			k.Add("ens1f0np0")
			k.Add("ens1f1np1")
			full := make([]dcb.App, 0, 64)
			for d := uint8(0); d < 64; d++ {
				full = append(full, dcb.DSCP(d, d>>3))
			}
			k.Update("ens1f0np0", func(n *dcbtest.Netdev) { n.Apps = full })
			pol := parsePolicy(t, "[modules]\nenable = false\n[[roce]]\ndevice = \"mlx5_0\"\ntos = 106\n")
			return diagnose(t, root, withPolicy(p(pol)), withDCB(k))
		}, `qos = [{ device = "mlx5_0", port = 1, trust = "dscp", pfc = [3] }]`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			open := must(t, c.fs(func(p *config.Policy) *config.Policy { return p }), c.id, c.subject)
			if !declares(open.Fix, true) {
				t.Errorf(`[api] changes = "all": the fix offers no rdmactl command: %q`, open.Fix)
			}
			for _, changes := range []config.APIChanges{config.APIChangesRuntime, config.APIChangesNone} {
				f := must(t, c.fs(func(p *config.Policy) *config.Policy { return restricted(p, changes) }), c.id, c.subject)
				if declares(f.Fix, changes == config.APIChangesRuntime) {
					t.Errorf("[api] changes = %q: the fix offers a command the host refuses: %q", changes, f.Fix)
				}
				if !strings.Contains(f.Fix, c.inFile) {
					t.Errorf("[api] changes = %q: the fix does not say %q: %q", changes, c.inFile, f.Fix)
				}
				if !strings.Contains(f.Fix, "10-site.toml:2: [api] changes = ") {
					t.Errorf("[api] changes = %q: the fix does not name the file that forbids the command: %q", changes, f.Fix)
				}
			}
		})
	}
}
