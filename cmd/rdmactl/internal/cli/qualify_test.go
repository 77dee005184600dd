package cli

import (
	"testing"

	"github.com/godbus/dbus/v5"
)

// rdmad's Disruptions property (a(ssssss): driver, setting, key, effect,
// when, follows) is read into qualify's rows; an rdmad without it, or with
// another shape, is said, not taken as an empty table.
func TestDisruptionRows(t *testing.T) {
	// As godbus decodes an a(ssssss) from the wire: each struct a []any.
	rows, why := disruptionRows(map[string]dbus.Variant{"Disruptions": dbus.MakeVariant([][]any{
		{"mlx5_core", "qos_pfc", "qos.pfc", "link-toggle", "when the PFC priorities change", "mlx5e_dcbnl_ieee_setpfc"},
	})})
	if why != "" || len(rows) != 1 || rows[0].Driver != "mlx5_core" || rows[0].Setting != "qos_pfc" || rows[0].Effect != "link-toggle" {
		t.Errorf("rows %+v, %q", rows, why)
	}
	if rows, why := disruptionRows(map[string]dbus.Variant{}); rows != nil || why != "this rdmad publishes no Disruptions table" {
		t.Errorf("no property: %+v %q", rows, why)
	}
	if rows, why := disruptionRows(map[string]dbus.Variant{"Disruptions": dbus.MakeVariant([]string{"x"})}); rows != nil || why == "" {
		t.Errorf("another shape: %+v %q", rows, why)
	}
}
