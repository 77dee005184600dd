// Package config reads rdmad's declared policy: /etc/rdma/rdmad.toml followed
// by the drop-ins /etc/rdma/rdmad.d/*.toml in lexical order. Files are decoded
// strictly (unknown keys and wrong types are errors naming file and line) and
// then validated into the typed Policy below; nothing downstream sees raw TOML.
package config

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/rdmad/rdmad/daemon/config/value"
)

// Default locations, relative to the host root ("/" in production).
const (
	MainFile      = "etc/rdma/rdmad.toml"
	DropInDir     = "etc/rdma/rdmad.d"
	ModulesDir    = "etc/rdma/modules"
	PersistedName = "zz-rdmad-persist.toml" // the one drop-in rdmad owns and rewrites
)

// Position says where a value was declared, for error messages and reports.
type Position struct {
	File string
	Line int // 0 when the parser could not tell
}

// RuntimeFile is the File of a declaration made over D-Bus without
// persist (the service's runtime overlay), as action reports and D-Bus
// properties show it: no file holds it, and it lasts until rdmad stops.
const RuntimeFile = "runtime"

// IsRuntime reports whether the declaration was made at runtime.
func (p Position) IsRuntime() bool { return p.File == RuntimeFile }

// String is "file:line", or the file alone when the line is not known.
// One rule is the source of thousands of records and actions at 1,024
// devices, each naming it: the text is made once and shared
// (positionTexts), not made again for each.
func (p Position) String() string {
	if p.Line <= 0 {
		return p.File
	}
	positionTexts.mu.Lock()
	defer positionTexts.mu.Unlock()
	if s, ok := positionTexts.m[p]; ok {
		return s
	}
	if len(positionTexts.m) >= maxPositionTexts {
		clear(positionTexts.m) // reloads of changing files: start over
	}
	s := p.File + ":" + strconv.Itoa(p.Line)
	positionTexts.m[p] = s
	return s
}

// positionTexts are the texts of the positions named so far.
var positionTexts = struct {
	mu sync.Mutex
	m  map[Position]string
}{m: map[Position]string{}}

// maxPositionTexts bounds positionTexts: a policy has far fewer sources.
const maxPositionTexts = 4096

// Policy is the validated, merged configuration.
type Policy struct {
	Files     []string // files in force, in the order they were merged
	MainFile  string   // the main file Load was asked for (it may not exist); "" from Parse
	DropInDir string   // where drop-ins, and rdmad's PersistedName, live; "" from Parse
	Modules   Modules
	Memlock   *Memlock // nil: rdmad does not manage memlock limits
	Netns     Netns
	RoCE      []RoCERule // in declaration order; later rules win per field
	Links     []Link
	// ShadowedLinks are links a file declared that a later declaration
	// of the same name replaced (a later file, rdmad's drop-in, a runtime
	// change) or a runtime change deleted: doctor names them.
	ShadowedLinks []ShadowedLink
	// NetnsDeclarations are where the files set [netns] mode, in merge
	// order (the last is Netns.Source): doctor tells one a later file
	// overrides.
	NetnsDeclarations []Position
	VPI               []VPIRule // mlx4 VPI port types; later rules win
	QoS               []QoSRule // lossless RoCE (PFC, DSCP trust); later rules win per field
	Metrics           Metrics
	API               API // what D-Bus clients may declare ([api], api.go)
	// Drift is what rdmad does about changes made behind its back
	// ([drift], drift.go).
	Drift Drift
	// Expect is what doctor judges ports against ([[expect]], health.go);
	// later rules win per field.
	Expect []ExpectRule
	// Doctor is [doctor]: findings ignored, error-counter sampling.
	Doctor Doctor
	// MemlockCheckUnits are the services beside slurmd and pbs_mom whose
	// memlock limit doctor checks ([memlock] check_units; the last file
	// that sets it wins). It does not make rdmad manage memlock.
	MemlockCheckUnits UnitList
}

// UnitList is a list of systemd units and where it was declared.
type UnitList struct {
	Names  []string // "slurmd.service"
	Source Position
}

// Metrics is the [metrics] table.
type Metrics struct {
	// Textfile is where node_exporter textfile metrics are written, an
	// absolute path ending in .prom as written (the host root is prefixed
	// when used); "" writes none, the default.
	Textfile string
}

// Modules is the [modules] table.
type Modules struct {
	Enable    bool   // default true
	Directory string // absolute path as written (default /etc/rdma/modules); the host root is prefixed when used
}

// Memlock is the [memlock] table.
type Memlock struct {
	Group    string // default "rdma"
	Soft     Limit  // default unlimited
	Hard     Limit  // default unlimited
	Services bool   // also render DefaultLimitMEMLOCK= for systemd services; default false
	// Source is the last [memlock] table of the files, where the limits
	// rdmad writes are declared.
	Source Position
}

// Limit is a memlock limit: unlimited, or a number of bytes.
type Limit struct {
	Unlimited bool
	Bytes     uint64
}

// LimitsConf renders the limit for limits.conf(5), whose memlock unit is KiB.
func (l Limit) LimitsConf() string {
	if l.Unlimited {
		return "unlimited"
	}
	return fmt.Sprintf("%d", (l.Bytes+1023)/1024)
}

// Systemd renders the limit for systemd's DefaultLimitMEMLOCK= (bytes).
func (l Limit) Systemd() string {
	if l.Unlimited {
		return "infinity"
	}
	return fmt.Sprintf("%d", l.Bytes)
}

func (l Limit) String() string {
	if l.Unlimited {
		return "unlimited"
	}
	return fmt.Sprintf("%d", l.Bytes)
}

// NetnsMode is the RDMA subsystem network namespace mode.
type NetnsMode string

const (
	NetnsUnmanaged NetnsMode = "" // not declared: leave the kernel alone
	NetnsShared    NetnsMode = "shared"
	NetnsExclusive NetnsMode = "exclusive"
)

// Netns is the [netns] table.
type Netns struct {
	// Mode is the mode the files (rdmad's drop-in included) declare: the
	// one ib_core gets at boot through modprobe.d.
	Mode NetnsMode
	// Source is where Mode was declared (the file that wins); zero when
	// no file declares it.
	Source Position
	// Runtime is a mode set over D-Bus without persist (never read from a
	// file). When set, it is switched in the running kernel instead of
	// Mode, and it is never written for the next boot.
	Runtime NetnsMode
	// Note is who set Mode over D-Bus (rdmad's drop-in declares it), and
	// RuntimeNote who set Runtime.
	Note, RuntimeNote Note
}

// InForce is the mode the running kernel is kept in: the runtime one (set
// over D-Bus without persist) when there is one, else the declared one.
func (n Netns) InForce() NetnsMode {
	if n.Runtime != NetnsUnmanaged {
		return n.Runtime
	}
	return n.Mode
}

// RoCEMode is a declared RoCE mode, as written in the config ("v1", "v2").
type RoCEMode string

const (
	RoCEv1 RoCEMode = value.RoCEv1
	RoCEv2 RoCEMode = value.RoCEv2
)

// Kernel returns the exact string configfs rdma_cm accepts for the mode.
func (m RoCEMode) Kernel() string {
	switch m {
	case RoCEv1:
		return value.KernelRoCEv1
	case RoCEv2:
		return value.KernelRoCEv2
	}
	return ""
}

// RoCEModeFromKernel maps a configfs default_roce_mode value back to v1/v2.
func RoCEModeFromKernel(s string) (RoCEMode, bool) {
	switch strings.TrimSpace(s) {
	case value.KernelRoCEv1:
		return RoCEv1, true
	case value.KernelRoCEv2:
		return RoCEv2, true
	}
	return "", false
}

// Name selects RDMA devices by name, typed: a glob (path.Match syntax, as
// the files write it) when Pattern is set, else exactly one name, whatever
// bytes it holds (a device named over D-Bus, "mlx5_*" included). A name
// is never stored escaped: Text writes a literal name's glob characters
// escaped where a file needs them, and the files' parser gives a pattern
// without glob characters back as the exact name it selects.
type Name struct {
	Name    string
	Pattern bool
}

// Exact selects the device named name and no other.
func Exact(name string) Name { return Name{Name: name} }

// Glob is a device name as the files write it: a pattern, or, when it has
// no glob character that is not escaped, the one exact name it selects
// (so "mlx5_0" and "mlx5\\*" are the names mlx5_0 and mlx5*).
func Glob(pattern string) Name {
	for i := 0; i < len(pattern); i++ {
		switch pattern[i] {
		case '\\':
			i++
		case '*', '?', '[':
			return Name{Name: pattern, Pattern: true}
		}
	}
	return Exact(unescapeGlob(pattern))
}

// Empty reports whether n selects by name at all.
func (n Name) Empty() bool { return n.Name == "" && !n.Pattern }

// Match reports whether n selects the device named s.
func (n Name) Match(s string) bool {
	if !n.Pattern {
		return n.Name == s
	}
	ok, _ := path.Match(n.Name, s)
	return ok
}

// Text is n as the files write it: the pattern, or the exact name with its
// glob characters escaped.
func (n Name) Text() string {
	if n.Pattern {
		return n.Name
	}
	return escapeGlob(n.Name)
}

// Selector picks RDMA devices. Every non-empty field must match.
type Selector struct {
	Device Name   // the RDMA device name
	GUID   string // node GUID, as in sysfs node_guid (xxxx:xxxx:xxxx:xxxx), case-insensitive
	PCI    string // PCI address, glob (e.g. "0000:3b:00.*")
	Netdev string // glob on a netdev name attached to the device
	Driver string // kernel driver name (mlx5_core, rdma_rxe, ...)
}

// Target is what a Selector is matched against: the identity of one device.
type Target struct {
	Name     string
	NodeGUID string
	PCI      string
	Driver   string
	Netdevs  []string
}

// Matches reports whether the selector picks the target.
func (s Selector) Matches(t Target) bool {
	if !s.Device.Empty() && !s.Device.Match(t.Name) {
		return false
	}
	if s.GUID != "" && !strings.EqualFold(s.GUID, t.NodeGUID) {
		return false
	}
	if s.PCI != "" {
		if ok, _ := path.Match(strings.ToLower(s.PCI), strings.ToLower(t.PCI)); !ok {
			return false
		}
	}
	if s.Driver != "" && s.Driver != t.Driver {
		return false
	}
	if s.Netdev != "" {
		found := false
		for _, n := range t.Netdevs {
			if ok, _ := path.Match(s.Netdev, n); ok {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func (s Selector) String() string {
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, fmt.Sprintf("%s=%q", k, v))
		}
	}
	add("device", s.Device.Text())
	add("guid", s.GUID)
	add("pci", s.PCI)
	add("netdev", s.Netdev)
	add("driver", s.Driver)
	return strings.Join(parts, " ")
}

// RoCERule is one [[roce]] entry.
type RoCERule struct {
	Source Position
	// Note is who declared it over D-Bus and when (rdmad's own rules).
	Note Note
	Selector
	Port int      // 0: every port of the device
	Mode RoCEMode // "": not declared by this rule
	TOS  *int     // nil: not declared by this rule; else 0..255
	// TrafficClass true also writes the TOS to OFED's global traffic
	// class of the port (tc/<port>/traffic_class), which every QP of the
	// port then uses; false leaves it alone. nil: not declared.
	TrafficClass *bool
}

// RoCEDesired is the resolved policy for one port.
type RoCEDesired struct {
	Mode         RoCEMode // "" when no rule declares a mode
	TOS          *int     // nil when no rule declares a TOS
	ModeSource   Position // where the winning mode was declared
	TOSSource    Position
	TrafficClass Declared[bool]
}

// Empty reports whether no rule applies to the port.
func (d RoCEDesired) Empty() bool { return d.Mode == "" && d.TOS == nil && !d.TrafficClass.Set }

// ShadowedLink is a link declaration that a later one replaced.
type ShadowedLink struct {
	Link Link     // the replaced declaration, with its Source
	By   Position // where the replacing declaration was made (a file:line, or the runtime)
	// Deleted says a runtime change deleted the link rather than
	// redeclared it.
	Deleted bool
}

// LinkType is the kind of soft RDMA device.
type LinkType string

const (
	LinkRXE LinkType = "rxe"
	LinkSIW LinkType = "siw"
)

// Link is one [[link]] entry: a soft RDMA device kept in existence.
type Link struct {
	Source Position
	Note   Note // who declared it over D-Bus and when (rdmad's own links)
	Name   string
	Type   LinkType
	Netdev string
}

// VPIType is an mlx4 VPI port type.
type VPIType string

const (
	VPIib   VPIType = "ib"
	VPIeth  VPIType = "eth"
	VPIauto VPIType = "auto"
)

// VPIRule is one [[vpi]] entry.
type VPIRule struct {
	Source Position
	Selector
	Port int // 0: every port
	Type VPIType
}

// VPIDesired is the resolved port type of one port.
type VPIDesired struct {
	Type   VPIType // "" when no rule declares one
	Source Position
}

// QoSTrust is what a port classifies received traffic by.
type QoSTrust string

const (
	TrustDSCP QoSTrust = "dscp" // the DSCP of the IP header, through the APP table
	TrustPCP  QoSTrust = "pcp"  // the 802.1p priority of the VLAN tag
)

// QoSRule is one [[qos]] entry: lossless RoCE on the netdev of each
// selected Ethernet port.
type QoSRule struct {
	Source Position
	// Note is who declared it over D-Bus and when (rdmad's own rules).
	Note Note
	Selector
	Port  int      // 0: every port
	Trust QoSTrust // "": not declared by this rule
	// PFC lists the priorities (0..7, ascending, no repeats) with PFC on
	// when HasPFC; empty with HasPFC turns PFC off. !HasPFC: not declared.
	PFC    []uint8
	HasPFC bool
	// DSCPPrio maps DSCP (0..63) to priority (0..7): entries overlaid on
	// the default DSCP>>3 table when trust is dscp. nil: none declared.
	DSCPPrio map[uint8]uint8
	LosslessRule
}

// QoSDesired is the resolved [[qos]] policy for one port. Each field
// (trust, pfc, each dscp_prio entry) is resolved on its own: the last
// matching rule that sets it wins.
type QoSDesired struct {
	Trust       QoSTrust // "" when no rule declares it
	TrustSource Position
	PFC         []uint8 // priorities with PFC on, when HasPFC
	HasPFC      bool
	PFCSource   Position
	DSCPPrio    map[uint8]uint8    // nil when no rule declares an entry
	DSCPSource  map[uint8]Position // where each entry was declared
	LosslessDesired
}

// Empty reports whether no rule applies to the port.
func (d QoSDesired) Empty() bool {
	return d.Trust == "" && !d.HasPFC && len(d.DSCPPrio) == 0 && d.LosslessDesired.Empty()
}

// FirstSource is where the first declared field of d was declared (trust,
// pfc, then the dscp_prio entry of the lowest DSCP), for an action about
// the port as a whole.
func (d QoSDesired) FirstSource() Position {
	switch {
	case d.Trust != "":
		return d.TrustSource
	case d.HasPFC:
		return d.PFCSource
	}
	if len(d.DSCPSource) > 0 {
		// The entry of the lowest DSCP: the same every time.
		return d.DSCPSource[slices.Min(slices.Collect(maps.Keys(d.DSCPSource)))]
	}
	return d.LosslessDesired.FirstSource()
}

// DSCPTable is the full 64-entry DSCP -> priority table trust dscp
// writes: DSCP>>3 (the kernel's and the switches' default), overlaid by
// the declared dscp_prio entries.
func (d QoSDesired) DSCPTable() [64]uint8 {
	var t [64]uint8
	for i := range t {
		t[i] = uint8(i) >> 3
	}
	for k, v := range d.DSCPPrio {
		if k < 64 {
			t[k] = v
		}
	}
	return t
}

// PFCMask is the pfc_en bit mask of d.PFC (bit N = priority N).
func (d QoSDesired) PFCMask() uint8 {
	var m uint8
	for _, p := range d.PFC {
		m |= 1 << (p & 7)
	}
	return m
}
