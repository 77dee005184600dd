package config

// Key names one declarable setting as the files write it: the table and
// the key ("roce.tos"). A part's setting says which key declares it
// (reconcile.Setting.Key), and a mutating call names the keys it declares,
// so the service learns whether its call took without knowing any part.
type Key string

// The keys of the settings rdmad keeps. A new setting adds its key here
// beside the decoder of its table; a lossless [[qos]] key has its Key
// from its entry in losslesskeys.go (QoSCableLength.Key()).
const (
	KeyRoCEMode Key = "roce.mode"
	KeyRoCETOS  Key = "roce.tos"
	KeyQoSTrust Key = "qos.trust" // with qos.dscp_prio: the DSCP entries of the APP table
	KeyQoSPFC   Key = "qos.pfc"

	KeyRoCETrafficClass Key = "roce.traffic_class"
	KeyVPIType          Key = "vpi.type"
	KeyLink             Key = "link"
	KeyNetnsMode        Key = "netns.mode"
	KeyMemlock          Key = "memlock"
)

// Declares reports whether anything in the policy declares key, on any
// subject: a removed declaration is undone only once nothing declares it.
// Keys of settings judged per subject (a port's, a link's) are answered
// by their records; this answers the host-wide ones, and true for a key
// it does not know.
func (p *Policy) Declares(k Key) bool {
	switch k {
	case KeyMemlock:
		return p.Memlock != nil
	case KeyNetnsMode:
		return p.Netns.InForce() != NetnsUnmanaged
	case KeyLink:
		return len(p.Links) > 0
	case KeyQoSPFC:
		for _, r := range p.QoS {
			if r.HasPFC {
				return true
			}
		}
		return false
	case KeyQoSTrust:
		for _, r := range p.QoS {
			if r.Trust != "" || len(r.DSCPPrio) > 0 {
				return true
			}
		}
		return false
	case KeyRoCEMode, KeyRoCETOS:
		for _, r := range p.RoCE {
			if (k == KeyRoCEMode && r.Mode != "") || (k == KeyRoCETOS && r.TOS != nil) {
				return true
			}
		}
		return false
	case KeyVPIType:
		return len(p.VPI) > 0
	}
	return true
}

// DeclaresNothing reports whether p is the policy of a daemon whose files
// do not load and that has no last good configuration (NothingDeclared):
// rdmad then changes nothing, and undoes nothing.
func (p *Policy) DeclaresNothing() bool { return p.Files != nil && len(p.Files) == 0 }
