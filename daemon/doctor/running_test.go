package doctor_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/health"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// runningFake is a running rdmad: BetweenCalls records that the snapshot, the
// policy and the config error are read inside it.
type runningFake struct {
	h       *host.Host
	pol     *config.Policy
	cfgErr  error
	settled bool
	outside []string // reads made outside BetweenCalls
}

func (r *runningFake) Host() *host.Host { return r.h }
func (r *runningFake) BetweenCalls(fn func()) {
	r.settled = true
	fn()
	r.settled = false
}
func (r *runningFake) PolicyInForce() *config.Policy { r.inside("policy"); return r.pol }
func (r *runningFake) ConfigError() error            { r.inside("config error"); return r.cfgErr }
func (r *runningFake) DCB() dcb.Reader               { return nil }
func (r *runningFake) Health() *health.Monitor       { return nil }
func (r *runningFake) InForce() config.InForce {
	r.inside("in force")
	return config.InForce{Origin: config.OriginNothing}
}
func (r *runningFake) inside(what string) {
	if !r.settled {
		r.outside = append(r.outside, what)
	}
}

// RunningInput hands doctor the observed devices, each port's standing
// failures joined into one message, and the policy, config error and
// snapshot read together while no call is under way.
func TestRunningInput(t *testing.T) {
	r := &runningFake{h: host.New(t.TempDir()), pol: &config.Policy{}, cfgErr: errors.New("rdmad.toml:3: bad")}
	st := reconcile.State{Devices: []reconcile.DeviceState{
		{Device: host.Device{Name: "mlx5_0"}, Ports: []reconcile.PortState{
			{Port: host.Port{Number: 1}, Failures: []reconcile.Action{{Err: errors.New("roce tos: input/output error")}, {Err: errors.New("roce mode: invalid argument")}}},
			{Port: host.Port{Number: 2}},
		}},
		{Device: host.Device{Name: "rxe0"}, Ports: []reconcile.PortState{{Port: host.Port{Number: 1}}}},
	}}
	snapshot := func() reconcile.State {
		r.inside("snapshot")
		return st
	}
	checks := []reconcile.Checker{nil}
	in := doctor.RunningInput(r, snapshot, checks)
	if len(r.outside) > 0 {
		t.Errorf("read outside BetweenCalls: %v", r.outside)
	}
	if in.Host != r.h || in.Policy != r.pol || in.ConfigError != r.cfgErr || in.InForce.Origin != config.OriginNothing {
		t.Errorf("host %v policy %v config error %v in force %+v", in.Host, in.Policy, in.ConfigError, in.InForce)
	}
	if len(in.Devices) != 2 || in.Devices[0].Name != "mlx5_0" || in.Devices[1].Name != "rxe0" {
		t.Errorf("devices %+v", in.Devices)
	}
	want := map[doctor.PortRef]string{{Device: "mlx5_0", Port: 1}: "roce tos: input/output error\nroce mode: invalid argument"}
	if len(in.Errors) != len(want) || in.Errors[doctor.PortRef{Device: "mlx5_0", Port: 1}] != want[doctor.PortRef{Device: "mlx5_0", Port: 1}] {
		t.Errorf("errors %q, want %q", in.Errors, want)
	}
	// The state doctor judges settings on is the snapshot itself, with
	// the parts' checks.
	if in.State == nil || len(in.State.Devices) != 2 || len(in.Checks) != 1 {
		t.Errorf("state %+v, checks %v", in.State, in.Checks)
	}
}

// Doctor says which policy is in force when the files do not load, and
// reports what stands in the way of the last good configuration: a copy
// that cannot be used, a save refused by a file rdmad did not write, a
// save that failed.
func TestConfigFindingsSayWhatIsInForce(t *testing.T) {
	saved := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	notManaged := fmt.Errorf("save the last good configuration: /var/lib/rdmad/last-good-config.json: %w", host.ErrNotManaged)
	for _, c := range []struct {
		what     string
		in       doctor.Input
		id       string
		sev      doctor.Severity
		has, fix string
	}{
		{"nothing", doctor.Input{ConfigError: errors.New("rdmad.toml:3: bad"), InForce: config.InForce{Origin: config.OriginNothing}},
			"config-error", doctor.SeverityFail, "nothing declared is in force", "rdmactl reload"},
		{"last good", doctor.Input{ConfigError: errors.New("rdmad.toml:3: bad"),
			InForce: config.InForce{Origin: config.OriginLastGood, Saved: saved, Files: []string{"/etc/rdma/rdmad.toml"}}},
			"config-error", doctor.SeverityFail, "the last good configuration saved 2026-01-02T03:04:05Z (/etc/rdma/rdmad.toml)", "rdmactl reload"},
		{"unusable copy", doctor.Input{ConfigError: errors.New("rdmad.toml:3: bad"),
			InForce: config.InForce{Origin: config.OriginNothing, Unusable: errors.New("no header")}},
			"last-good", doctor.SeverityWarn, "the saved copy cannot be used: no header", "once they load"},
		{"blocked save", doctor.Input{InForce: config.InForce{Origin: config.OriginFiles, SaveError: notManaged}},
			"last-good", doctor.SeverityWarn, "cannot be saved: save the last good configuration: /var/lib/rdmad/last-good-config.json", "move the file named away"},
		{"failed save", doctor.Input{InForce: config.InForce{Origin: config.OriginFiles, SaveError: errors.New("no space left on device")}},
			"last-good", doctor.SeverityWarn, "no space left on device", "tries again after every pass"},
	} {
		c.in.Host = host.New(t.TempDir())
		c.in.Devices = []host.Device{}
		var found *doctor.Finding
		for _, f := range doctor.Diagnose(t.Context(), c.in) {
			if f.ID == c.id {
				found = &f
			}
		}
		if found == nil || found.Severity != c.sev || !strings.Contains(found.Finding, c.has) || !strings.Contains(found.Fix, c.fix) {
			t.Errorf("%s: %s finding %+v, want %s saying %q, fix %q", c.what, c.id, found, c.sev, c.has, c.fix)
		}
	}
}
