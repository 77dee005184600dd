package config

// Key names one declarable setting as the files write it: the table and
// the key ("roce.tos"). A part's setting says which key declares it
// (reconcile.Setting.Key), and a mutating call names the keys it declares,
// so the service learns whether its call took without knowing any part.
type Key string

// The keys of the settings rdmad keeps. A new setting adds its key here
// beside the decoder of its table.
const (
	KeyRoCEMode Key = "roce.mode"
	KeyRoCETOS  Key = "roce.tos"
	KeyQoSTrust Key = "qos.trust" // with qos.dscp_prio: the DSCP entries of the APP table
	KeyQoSPFC   Key = "qos.pfc"

	KeyQoSCableLength     Key = "qos.cable_length"
	KeyQoSPrioTC          Key = "qos.prio_tc"
	KeyQoSTCBandwidth     Key = "qos.tc_bandwidth" // with qos.tc_tsa
	KeyQoSTCMaxrate       Key = "qos.tc_maxrate"
	KeyQoSPrioBuffer      Key = "qos.prio_buffer"
	KeyQoSBufferSize      Key = "qos.buffer_size"
	KeyQoSUDPPortPrio     Key = "qos.udp_port_prio"
	KeyQoSPause           Key = "qos.pause"
	KeyQoSPFCStormTimeout Key = "qos.pfc_storm_timeout"
	KeyQoSECN             Key = "qos.ecn"
	KeyQoSCNPDSCP         Key = "qos.cnp_dscp"
	KeyQoSCNPPriority     Key = "qos.cnp_priority"
	KeyQoSDCBX            Key = "qos.dcbx"
	KeyRoCETrafficClass   Key = "roce.traffic_class"
	KeyVPIType            Key = "vpi.type"
	KeyLink               Key = "link"
	KeyNetnsMode          Key = "netns.mode"
	KeyMemlock            Key = "memlock"
)
