package reconcile_test

import (
	"testing"

	"github.com/rdmad/rdmad/daemon/reconcile"
)

// A row's Changes made with ChangesOf asks its comparison only of two
// values of its type: a value of another type or none counts as a change,
// so a row never misses a disruption for a value it cannot read.
func TestChangesOf(t *testing.T) {
	odd := reconcile.ChangesOf(func(from, to num) bool { return from%2 != to%2 })
	for _, c := range []struct {
		from, to reconcile.Value
		want     bool
	}{
		{num(1), num(3), false},
		{num(1), num(2), true},
		{num(2), num(2), false},
		{nil, num(2), true},
		{num(2), nil, true},
		{hiddenValue{2}, num(2), true},
		{num(2), hiddenValue{2}, true},
	} {
		if got := odd(c.from, c.to); got != c.want {
			t.Errorf("%v to %v: changes %v, want %v", c.from, c.to, got, c.want)
		}
	}
	table := []reconcile.Disruption{{Driver: "mlx5_core", Setting: numSetting.Setting(), Effect: reconcile.EffectLinkToggle, Changes: odd}}
	if _, ok := reconcile.Disrupting(table, "mlx5_core", numSetting.Setting(), num(1), num(3)); ok {
		t.Error("a change the row's comparison says does not change: disrupts")
	}
	if d, ok := reconcile.Disrupting(table, "mlx5_core", numSetting.Setting(), num(1), num(2)); !ok || d.Effect != reconcile.EffectLinkToggle {
		t.Errorf("a change the row's comparison says changes: %+v %v", d, ok)
	}
}
