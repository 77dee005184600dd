package vpi

import (
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// Disruptions is what a change of a VPI port type does to traffic: mlx4
// unregisters the whole device, closes and sets every port, and registers
// it again (upstream Linux, drivers/net/ethernet/mellanox/mlx4/main.c,
// mlx4_change_port_types), so every port of the device stops, not only
// the one whose type changes.
var Disruptions = []reconcile.Disruption{
	{Driver: host.DriverMLX4, Setting: PortType.Setting(), Effect: reconcile.EffectDeviceReset,
		Changes: reconcile.ChangesOf(func(f, t TypeValue) bool { return effective(f) == "" || effective(f) != effective(t) }),
		When:    "when the port's type (ib or eth) changes; every port of the device stops",
		Follows: "mlx4_change_port_types: mlx4_unregister_device, mlx4_CLOSE_PORT and mlx4_SET_PORT on every port, mlx4_register_device"},
}

// effective is the type a port has or will have: what automatic sensing
// found for auto ("" when that is not known).
func effective(t TypeValue) config.VPIType {
	if t.Type == config.VPIauto {
		return config.VPIType(t.Sensed)
	}
	return t.Type
}

// Disruptions implements reconcile.Disruptive.
func (*Part) Disruptions() []reconcile.Disruption { return Disruptions }
