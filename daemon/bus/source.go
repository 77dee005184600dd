package bus

import (
	"context"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/health"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/service"
)

// State is what the bus reads of the observed state: the reconciler
// (*reconcile.Reconciler) in the daemon. OnChange listeners only mark what
// a pass changed; the bus converts and emits on goroutines of its own.
type State interface {
	Summary() reconcile.Summary
	DeviceStates(names []string) []reconcile.DeviceState
	Snapshot() reconcile.State
	OnChange(fn func(reconcile.Change))
	// Checkers are the parts' own health checks, for Diagnose.
	Checkers() []reconcile.Checker
	// Disruptions is the parts' table of what a change does to traffic
	// (the Manager's Disruptions property).
	Disruptions() []reconcile.Disruption
	// Notifications is the parts' table of how another process's change
	// of each setting reaches rdmad (the Manager's Notifications property).
	Notifications() []reconcile.Notification
}

// Daemon is what the bus reads of the declarations and the calls it
// serves: the service (*service.Service) in the daemon.
type Daemon interface {
	PolicyInForce() *config.Policy
	Declared() (*config.Policy, service.Overlay)
	ConfigError() error
	// InForce says which policy is in force (the files, the last good
	// one, nothing) and how the saved copy stands.
	InForce() config.InForce
	OnConfigChange(fn func())
	// BetweenCalls runs fn while no mutating call is between its change
	// and its outcome, so what fn reads is what holds: never a
	// declaration a refused call is about to withdraw.
	BetweenCalls(fn func())
	// AfterEachCall adds fn to the listeners of every mutating call's
	// end, under the same guarantee as BetweenCalls: the service publishes
	// the policy status that then holds, and fn calls nothing of it.
	AfterEachCall(fn func(service.PolicyStatus))
	// PolicyStatus is the policy in force and how it stands, read
	// together.
	PolicyStatus() service.PolicyStatus

	Host() *host.Host // for Diagnose
	NetnsKernel() service.NetnsKernel
	Health() *health.Monitor // for Diagnose: counters, link history

	// The Check methods validate a call's arguments without changing
	// anything, before authorization; CheckAPI applies [api] changes.
	CheckSetRoCE(c service.RoCEChange) error
	CheckSetQoS(c service.QoSChange) error
	CheckSetQoSSettings(c service.QoSSettingsChange) error
	CheckAddLink(l config.Link, persist bool) error
	CheckDeleteLink(name string, persist bool) error
	CheckSetNetnsMode(mode config.NetnsMode, persist bool) error
	CheckWithdraw(w service.Withdrawal) error
	CheckAPI(persist bool) error
	// CheckHoldCorrections validates a hold's arguments; the holds are
	// the service's, the leases (who holds, until when) the bus's.
	CheckHoldCorrections(h service.HoldRequest) error
	HoldCorrections(h service.HoldRequest) error
	ReleaseCorrections(holder, device string, port int) error
	ReleaseHolder(holder string)
	ReleaseAllHolds()
	// CheckPlan validates Plan's arguments; Plan works out, writing
	// nothing, what the files in force plus a candidate drop-in would do.
	CheckPlan(candidate []byte, as string) error
	Plan(ctx context.Context, candidate []byte, as string, step func(string)) (service.Plan, error)
	// CheckReadPorts validates ReadPorts' arguments; ReadPorts reads the
	// ports' settings from the kernel now, writing nothing.
	CheckReadPorts(device string, port int) error
	ReadPorts(ctx context.Context, device string, port int) (reconcile.Live, error)

	ReconcileNow(ctx context.Context) reconcile.Report
	ReloadNow(ctx context.Context) (reconcile.Report, error)
	SetRoCE(ctx context.Context, c service.RoCEChange) error
	SetQoS(ctx context.Context, c service.QoSChange) error
	SetQoSSettings(ctx context.Context, c service.QoSSettingsChange) error
	AddLink(ctx context.Context, l config.Link, persist bool) error
	DeleteLink(ctx context.Context, name string, persist bool) error
	SetNetnsMode(ctx context.Context, mode config.NetnsMode, persist bool) error
	Withdraw(ctx context.Context, w service.Withdrawal) error
}

var (
	_ State  = (*reconcile.Reconciler)(nil)
	_ Daemon = (*service.Service)(nil)
)
