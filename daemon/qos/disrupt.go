package qos

import (
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// Disruptions is what a change of each lossless setting does to traffic,
// per driver, as the kernel's drivers do it (upstream Linux,
// drivers/net/ethernet/mellanox/mlx5/core/en_dcbnl.c, en/port_buffer.c
// and en_ethtool.c; docs/decisions/qos.md names what was read). A plan
// marks the settings it would write whose row interrupts traffic;
// `rdmactl qualify` holds real adapters to this table. Rows with
// reconcile.EffectNone say that a change one might fear does not
// interrupt traffic, so a qualification can check that too. A driver or
// setting without a row is not known to interrupt traffic.
var Disruptions = mlx5Rows([]disruptionRow{
	{PFC.Setting(), reconcile.EffectLinkToggle, reconcile.ChangesOf(func(f, t PFCValue) bool { return !pfcHolds(f, t) }),
		"when the PFC priorities change",
		"mlx5e_dcbnl_ieee_setpfc: mlx5_set_port_pfc, then mlx5_toggle_port_link when pfc_en differs from the port's"},
	{CableLength.Setting(), reconcile.EffectNone, nil,
		"the PFC delay only resizes the lossless headroom",
		"mlx5e_dcbnl_ieee_setpfc: a new delay sets cable_len and mlx5e_port_manual_buffer_config rewrites the port buffers (PBMC); no link toggle"},
	{Trust.Setting(), reconcile.EffectQueueReset, reconcile.ChangesOf(func(f, t TrustValue) bool { return f.Trust != t.Trust }),
		"when the trust mode changes between pcp and dscp, on adapters whose minimum inline mode is L2 (ConnectX-4)",
		"mlx5e_dcbnl_ieee_setapp and _delapp: the first DSCP entry added or the last removed calls mlx5e_set_trust_state, " +
			"which switches the channels (mlx5e_safe_switch_channels) when the TX minimum inline mode changes (L2 to IP under dscp trust)"},
	{BufferSize.Setting(), reconcile.EffectNone, nil,
		"buffer sizes are written to the port's buffer register",
		"mlx5e_dcbnl_setbuffer: mlx5e_port_manual_buffer_config, port_set_buffer (PBMC); no link toggle"},
	{PrioBuffer.Setting(), reconcile.EffectNone, nil,
		"the priority to buffer map is written to the port",
		"mlx5e_dcbnl_setbuffer: mlx5e_port_set_priority2buffer; no link toggle"},
	{PrioTC.Setting(), reconcile.EffectNone, nil,
		"ETS is written to the port's scheduler registers",
		"mlx5e_dcbnl_ieee_setets: mlx5_set_port_prio_tc, mlx5_set_port_tc_group, mlx5_set_port_tc_bw_alloc"},
	{Bandwidth.Setting(), reconcile.EffectNone, nil,
		"ETS is written to the port's scheduler registers",
		"mlx5e_dcbnl_ieee_setets: mlx5_set_port_tc_bw_alloc"},
	{Maxrate.Setting(), reconcile.EffectNone, nil,
		"rate limits are written to the port",
		"mlx5e_dcbnl_ieee_setmaxrate: mlx5_modify_port_ets_rate_limit"},
	{Pause.Setting(), reconcile.EffectNone, nil,
		"global pause is written to the port",
		"mlx5e_ethtool_set_pauseparam: mlx5_set_port_pause; no link toggle"},
})

// disruptionRow is a row of mlx5's table: a reconcile.Disruption but for
// the driver, which every row shares.
type disruptionRow struct {
	setting       *reconcile.Setting
	effect        reconcile.Effect
	changes       func(from, to reconcile.Value) bool
	when, follows string
}

// mlx5Rows is rows as Disruptions of mlx5_core, in order.
func mlx5Rows(rows []disruptionRow) []reconcile.Disruption {
	out := make([]reconcile.Disruption, 0, len(rows))
	for _, r := range rows {
		out = append(out, reconcile.Disruption{Driver: MLX5Driver, Setting: r.setting, Effect: r.effect, Changes: r.changes, When: r.when, Follows: r.follows})
	}
	return out
}

// Disruptions implements reconcile.Disruptive.
func (*Part) Disruptions() []reconcile.Disruption { return Disruptions }

// pfcCost is what a PFC correction counts for when rdmad judges whether
// the setting is contested: a write whose driver toggles the link (mlx5)
// costs as much as two.
func pfcCost(dev *host.Device) int {
	if d, ok := reconcile.Disrupting(Disruptions, dev.Driver, PFC.Setting(), nil, nil); ok && d.Effect == reconcile.EffectLinkToggle {
		return 2
	}
	return 1
}
