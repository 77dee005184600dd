package reconcile

// The kinds of the parts' actions. Each part reports its own and exports
// them under its own name (roce.Mode is KindRoCEMode); they are listed here
// as well so that code which checks results (the service's mutating calls)
// names what it looks for without importing the part that does it: a part
// is reached only through the interfaces of this package.
const (
	KindRoCEMode     Kind = "roce mode"        // default_roce_mode of a port
	KindRoCETOS      Kind = "roce tos"         // default_roce_tos of a port
	KindRoCEConfigfs Kind = "configfs rdma_cm" // a device's rdma_cm directory
	KindRoCE         Kind = "roce"             // a [[roce]] rule on a port it does not apply to

	KindVPIPortType Kind = "vpi port type" // mlx4_port<N> of an mlx4 VPI port

	KindLinkCreate Kind = "soft link" // a declared soft link kept in existence
	KindLinkRemove Kind = "delete"    // a soft link deleted over D-Bus

	KindNetnsMode     Kind = "netns mode"       // the running kernel's RDMA netns mode
	KindNetnsModprobe Kind = "netns modprobe.d" // the mode ib_core gets at boot

	KindMemlockLimits  Kind = "memlock limits.d"
	KindMemlockSystemd Kind = "memlock DefaultLimitMEMLOCK"

	KindQoSPFC   Kind = "qos pfc"   // PFC priorities of a port's netdev (DCB)
	KindQoSTrust Kind = "qos trust" // DSCP trust: the DSCP entries of its APP table (DCB)
	KindQoS      Kind = "qos"       // a [[qos]] rule on a port it does not apply to
	KindQoSVF    Kind = "qos vf"    // a [[qos]] rule on a virtual function (DCB lives on the PF)
	KindQoSOwner Kind = "qos owner" // a netdev whose DCB another agent manages
	KindQoSMLX4  Kind = "qos mlx4_en modprobe.d"

	KindModules     Kind = "modules"      // the batch of listed modules
	KindModulesList Kind = "modules list" // reading /etc/rdma/modules
)
