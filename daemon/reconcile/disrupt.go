package reconcile

import "fmt"

// A write may cost more than the value it changes: on mlx5 a new PFC mask
// takes the port's link down and up, on mlx4 a new VPI port type
// re-registers the whole device. Parts say so in a table of their own (a
// Disruption per driver and setting); a plan marks the settings it would
// write whose row interrupts traffic, so an operator drains a node first,
// and rdmactl asks before a call that would.

// Effect is what a change of a setting does to the traffic of its subject,
// beyond the new value.
type Effect uint8

const (
	// EffectNone: the change takes effect without interrupting traffic
	// (a row that says so where one might expect otherwise: mlx5's cable
	// length resizes the headroom, the link stays up).
	EffectNone Effect = iota
	// EffectQueueReset: the driver reopens the netdev's queues (channels):
	// a moment without traffic on it, the link stays up.
	EffectQueueReset
	// EffectLinkToggle: the driver takes the port's link down and up:
	// about a second without traffic, and the peer sees the link drop.
	EffectLinkToggle
	// EffectDeviceReset: the driver unregisters and registers the whole
	// device again: every port of it stops, its netdevs and RDMA device
	// are recreated.
	EffectDeviceReset
)

var effectNames = [...]string{"none", "queue-reset", "link-toggle", "device-reset"}

// String is the effect as the plan's JSON and rdmactl name it
// ("link-toggle").
func (e Effect) String() string {
	if int(e) < len(effectNames) {
		return effectNames[e]
	}
	return fmt.Sprintf("effect(%d)", int(e))
}

// Interrupts reports whether the effect stops traffic.
func (e Effect) Interrupts() bool { return e != EffectNone }

// Disruption is one row of a part's table: on devices of Driver, a change
// of Setting has Effect.
type Disruption struct {
	// Driver is the PCI driver of the device (host.Device.Driver:
	// mlx5_core).
	Driver  string
	Setting *Setting
	Effect  Effect
	// Changes, when set, says whether writing to over from has the effect
	// (mlx5 resets the queues on a trust change only when the trust mode
	// changes, not when a DSCP entry does); nil: every change has it. A
	// value that is not known (nil) counts as a change.
	Changes func(from, to Value) bool
	// When says in words which change has the effect ("when the PFC
	// priorities change").
	When string
	// Follows names the kernel code the row was read from
	// (mlx5e_dcbnl_ieee_setpfc), so a reader can check it again.
	Follows string
}

// Applies reports whether writing to over from has the row's effect.
func (d Disruption) Applies(from, to Value) bool {
	return d.Changes == nil || from == nil || to == nil || d.Changes(from, to)
}

// ChangesOf is a Disruption's Changes for values of type T: a value of
// another type counts as a change, as an unknown one does; two values of
// T change when differ says they do.
func ChangesOf[T Value](differ func(from, to T) bool) func(from, to Value) bool {
	return func(from, to Value) bool {
		f, okf := from.(T)
		t, okt := to.(T)
		return !okf || !okt || differ(f, t)
	}
}

// Disruptive is a part that knows what changes of its settings do to
// traffic, per driver.
type Disruptive interface {
	Disruptions() []Disruption
}

// Disruptions is the table of every part, in part order: what a change of
// a setting does to traffic on each driver a part knows about.
func (r *Reconciler) Disruptions() []Disruption {
	var out []Disruption
	for _, p := range r.parts() {
		if d, ok := p.(Disruptive); ok {
			out = append(out, d.Disruptions()...)
		}
	}
	return out
}

// Disruption is the row for setting s on driver whose effect a change from
// from to to has and interrupts traffic; false when none does.
func (r *Reconciler) Disruption(driver string, s *Setting, from, to Value) (Disruption, bool) {
	return Disrupting(r.Disruptions(), driver, s, from, to)
}

// Disrupting looks a change up in table: the row for setting s on driver
// whose effect interrupts traffic and applies to a change from from to to.
func Disrupting(table []Disruption, driver string, s *Setting, from, to Value) (Disruption, bool) {
	if driver == "" || s == nil {
		return Disruption{}, false
	}
	for _, d := range table {
		if d.Driver == driver && d.Setting == s && d.Effect.Interrupts() && d.Applies(from, to) {
			return d, true
		}
	}
	return Disruption{}, false
}
