// Package dbusapi is what both sides of rdmad's D-Bus API share: the
// contract (org.rdmad1.xml, from which docs/dbus-api.md is generated), the
// names and object paths, the data model that the daemon publishes and
// clients decode and print as JSON, the escaping of host strings, and the
// client (dbusapi/client) rdmactl uses, and the table of the [[qos]] keys
// a client sends (QoSKeys). rdmactl's command tree is cmd/rdmactl/internal/cli.
// It imports nothing of the daemon but the rules of the values
// (daemon/config/value, which imports nothing and rdmactl links too); the
// server side is daemon/bus.
package dbusapi

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"
)

// Fixed names: clients, the D-Bus policy, the polkit actions and the
// activation file depend on them (docs/dbus-api.md).
const (
	BusName         = "org.rdmad1"
	RootPath        = dbus.ObjectPath("/org/rdmad1")
	DevicesPath     = "/org/rdmad1/devices"
	ManagerIface    = "org.rdmad1.Manager"
	DeviceIface     = "org.rdmad1.Device"
	PortIface       = "org.rdmad1.Port"
	ErrConfig       = "org.rdmad1.Error.Config"
	ErrFailed       = "org.rdmad1.Error.Failed"
	ErrNextBoot     = "org.rdmad1.Error.NextBoot"     // persisted; the running kernel takes it at the next boot
	ErrBusy         = "org.rdmad1.Error.Busy"         // a local limit: too many reports, or authorization checks, at once; try again later
	ErrNotAllowed   = "org.rdmad1.Error.NotAllowed"   // [api] changes in the configuration refuses the declaration; the message names the file:line
	ErrNoSuchDevice = "org.rdmad1.Error.NoSuchDevice" // no RDMA device (or network interface) of that name
	ErrNoSuchPort   = "org.rdmad1.Error.NoSuchPort"   // the device has no port of that number
	ErrNoSuchLink   = "org.rdmad1.Error.NoSuchLink"   // no soft link of that name is declared
	ErrInvalidArgs  = "org.freedesktop.DBus.Error.InvalidArgs"
	ErrAccessDenied = "org.freedesktop.DBus.Error.AccessDenied"
)

// IntrospectionXML is the contract, embedded so the daemon serves the same
// argument names and the docs generator reads the same file.
//
//go:embed org.rdmad1.xml
var IntrospectionXML []byte

// Manager is the org.rdmad1.Manager properties. Field tags: `prop` is the
// D-Bus property name, `json` the stable name of rdmactl -o json.
type Manager struct {
	Version       string   `prop:"Version" json:"version"`
	ConfigFiles   []string `prop:"ConfigFiles" json:"config_files"`
	ConfigError   string   `prop:"ConfigError" json:"config_error"`
	PolicyInForce string   `prop:"PolicyInForce" json:"policy_in_force"`
	PolicySaved   uint64   `prop:"PolicySaved" json:"policy_saved_usec"`
	LastGoodError string   `prop:"LastGoodError" json:"last_good_error"`
	LastReconcile uint64   `prop:"LastReconcile" json:"last_reconcile_usec"`
	LastResult    string   `prop:"LastResult" json:"last_result"`
	NetnsMode     string   `prop:"NetnsMode" json:"netns_mode"`
	Links         []Link   `prop:"Links" json:"links"`
	Modules       []string `prop:"Modules" json:"modules"`
	// APIChanges is [api] changes ("all", "runtime", "none") and
	// APIChangesSource the file:line that sets it ("" for the default).
	APIChanges       string            `prop:"APIChanges" json:"api_changes"`
	APIChangesSource string            `prop:"APIChangesSource" json:"api_changes_source"`
	Devices          []dbus.ObjectPath `prop:"Devices" json:"-"`
	// Disruptions is rdmad's table of what a change of a setting does to
	// traffic, per driver: a constant of the running rdmad, so not in the
	// Describe document.
	Disruptions []Disruption `prop:"Disruptions" json:"-"`
	// Holds are the holds on settings in force (HoldCorrections), by
	// port then holder.
	Holds []Hold `prop:"Holds" json:"holds"`
	// Notifications is rdmad's table of how another process's change of
	// each setting reaches it, per driver: a constant of the running
	// rdmad, so not in the Describe document.
	Notifications []Notification `prop:"Notifications" json:"-"`
}

// Notification is one row of the table of how a change of a setting made
// by another process reaches rdmad (D-Bus struct (ssss)).
type Notification struct {
	Driver  string `json:"driver"`  // the device's driver ("mlx5_core"), "" for every driver without a row of its own
	Setting string `json:"setting"` // the setting's name, as in Port.Settings: qos_pfc
	// Notice is NoticeInotify, NoticeDCB, NoticeEthtool or NoticeNone
	// (the verify read-back finds the change).
	Notice  string `json:"notice"`
	Follows string `json:"follows"` // the kernel code the row was read from
}

// ContestWindow is the time within which SettingContested's count of
// corrections fell: rdmad stops correcting a setting it put back that
// often within it. The daemon's contest rule is reconcile.ContestWindow,
// which a test of reconcile holds equal to this.
const ContestWindow = time.Minute

// The notices of the Notifications table.
const (
	NoticeNone    = "none"
	NoticeInotify = "inotify"
	NoticeDCB     = "dcb"
	NoticeEthtool = "ethtool"
)

// Hold is one caller's hold on settings of a port (D-Bus struct
// (suasst)): rdmad reads those settings and writes none of them until the
// caller releases them or leaves the bus.
type Hold struct {
	Device   string   `json:"device"`
	Port     uint32   `json:"port"`
	Settings []string `json:"settings"` // the settings' names, as in Port.Settings
	// Holder names the caller: its unique bus name and who it is (user,
	// uid, pid and command).
	Holder string `json:"holder"`
	Since  uint64 `json:"since_usec"` // when the hold began, µs since the epoch
}

// Disruption is one row of the table of what a change of a setting does to
// traffic on a driver (D-Bus struct (ssssss)).
type Disruption struct {
	Driver  string `json:"driver"`  // the device's PCI driver: mlx5_core
	Setting string `json:"setting"` // the setting's name, as in Port.Settings: qos_pfc
	Key     string `json:"key"`     // the configuration key that declares it: qos.pfc
	// Effect is DisruptsLink, DisruptsQueues, DisruptsDevice, or "none"
	// (a change that does not interrupt traffic where one might fear it).
	Effect  string `json:"effect"`
	When    string `json:"when"`    // which change has the effect, in words
	Follows string `json:"follows"` // the kernel code the row was read from
}

// Interrupts reports whether the row's change interrupts traffic.
func (d Disruption) Interrupts() bool { return d.Effect != "" && d.Effect != "none" }

// Link is a declared soft RDMA link (D-Bus struct (ssss)).
type Link struct {
	Name   string `json:"name"`
	Type   string `json:"type"`
	Netdev string `json:"netdev"`
	Source string `json:"source"`
}

// Device is the org.rdmad1.Device properties.
type Device struct {
	Name            string            `prop:"Name" json:"name"`
	Transports      []string          `prop:"Transports" json:"transports"`
	NodeType        string            `prop:"NodeType" json:"node_type"`
	NodeGUID        string            `prop:"NodeGUID" json:"node_guid"`
	SysImageGUID    string            `prop:"SysImageGUID" json:"sys_image_guid"`
	FirmwareVersion string            `prop:"FirmwareVersion" json:"fw_ver"`
	HCAType         string            `prop:"HCAType" json:"hca_type"`
	BoardID         string            `prop:"BoardID" json:"board_id"`
	Driver          string            `prop:"Driver" json:"driver"`
	PCIAddress      string            `prop:"PCIAddress" json:"pci_address"`
	Parent          string            `prop:"Parent" json:"parent"`
	Netdevs         []string          `prop:"Netdevs" json:"netdevs"`
	RoCEConfigfs    bool              `prop:"RoCEConfigfs" json:"roce_configfs"`
	PortPaths       []dbus.ObjectPath `prop:"Ports" json:"-"`
	Error           string            `prop:"Error" json:"error"`
	Ports           []Port            `json:"ports"` // filled by the client from the port objects
}

// Port is the org.rdmad1.Port properties.
type Port struct {
	Device            string     `prop:"Device" json:"device"`
	Number            uint32     `prop:"Number" json:"port"`
	Transport         string     `prop:"Transport" json:"transport"`
	State             string     `prop:"State" json:"state"`
	PhysState         string     `prop:"PhysState" json:"physical_state"`
	Rate              string     `prop:"Rate" json:"rate"`
	LinkLayer         string     `prop:"LinkLayer" json:"link_layer"`
	LID               string     `prop:"LID" json:"lid"`
	SMLID             string     `prop:"SMLID" json:"sm_lid"`
	GIDTypes          []string   `prop:"GIDTypes" json:"gid_types"`
	Netdevs           []string   `prop:"Netdevs" json:"netdevs"`
	RoCEMode          string     `prop:"RoCEMode" json:"roce_mode"`
	RoCETOS           int32      `prop:"RoCETOS" json:"roce_tos"`
	DesiredRoCEMode   string     `prop:"DesiredRoCEMode" json:"desired_roce_mode"`
	DesiredRoCETOS    int32      `prop:"DesiredRoCETOS" json:"desired_roce_tos"`
	DesiredRoCESource string     `prop:"DesiredRoCESource" json:"desired_roce_source"`
	QoSTrust          string     `prop:"QoSTrust" json:"qos_trust"`
	QoSPFC            Priorities `prop:"QoSPFC" json:"qos_pfc"`
	DesiredQoSTrust   string     `prop:"DesiredQoSTrust" json:"desired_qos_trust"`
	DesiredQoSPFC     Priorities `prop:"DesiredQoSPFC" json:"desired_qos_pfc"`
	DesiredQoSPFCSet  bool       `prop:"DesiredQoSPFCSet" json:"desired_qos_pfc_set"`
	DesiredQoSSource  string     `prop:"DesiredQoSSource" json:"desired_qos_source"`
	VPIType           string     `prop:"VPIType" json:"vpi_type"`
	// Drift: every declared setting that applies to the port, true when
	// it does not hold after the last pass (rdmad_port_drift's samples).
	Drift map[string]bool `prop:"Drift" json:"drift"`
	// Settings: every setting of the port as its part recorded it.
	Settings []Setting `prop:"Settings" json:"settings"`
	// Corrected: how many times rdmad put each setting of the port back
	// since it started (changes another process made), by setting name;
	// settings never corrected are not listed.
	Corrected map[string]uint32 `prop:"Corrected" json:"corrected"`
	Error     string            `prop:"Error" json:"error"`
}

// Setting is one setting of a port as rdmad's records say (D-Bus struct
// (sssssss)): what is declared and where, what the kernel holds, and
// whether it holds.
type Setting struct {
	Name     string `json:"name"`
	Title    string `json:"title"`
	Declared string `json:"declared"`
	Source   string `json:"source"`
	Observed string `json:"observed"`
	State    string `json:"state"`
	Why      string `json:"why"`
}

// The states of a setting (Setting.State).
const (
	SettingHolds         = "holds"
	SettingUndeclared    = "undeclared"
	SettingNotApplicable = "not-applicable"
)

// Wire is one setting's values as the properties that carry a single
// setting take them (FillSingle): Declared and Observed in the property's
// Go type, nil when there is none.
type Wire struct {
	Name               string
	Declared, Observed any
	Source             string
}

// FillSingle sets the Port properties that each carry one setting
// (RoCEMode, DesiredRoCETOS, QoSPFC...) from the settings' values; the
// declared sources of a group (RoCE, QoS) are joined in a fixed order.
// Settings without such properties are skipped.
func (p *Port) FillSingle(ws []Wire) {
	p.RoCETOS, p.DesiredRoCETOS = -1, -1
	src := map[string]string{}
	for _, w := range ws {
		if w.Declared != nil {
			src[w.Name] = w.Source
		}
		switch w.Name {
		case "roce_mode":
			p.RoCEMode, _ = w.Observed.(string)
			p.DesiredRoCEMode, _ = w.Declared.(string)
		case "roce_tos":
			if v, ok := w.Observed.(int32); ok {
				p.RoCETOS = v
			}
			if v, ok := w.Declared.(int32); ok {
				p.DesiredRoCETOS = v
			}
		case "qos_trust":
			p.QoSTrust, _ = w.Observed.(string)
			p.DesiredQoSTrust, _ = w.Declared.(string)
		case "qos_pfc":
			if v, ok := w.Observed.([]byte); ok {
				p.QoSPFC = v
			}
			if v, ok := w.Declared.([]byte); ok {
				p.DesiredQoSPFC, p.DesiredQoSPFCSet = v, true
			}
		case "vpi_type":
			p.VPIType, _ = w.Declared.(string)
		}
	}
	p.DesiredRoCESource = joinSources(src["roce_mode"], src["roce_tos"])
	p.DesiredQoSSource = joinSources(src["qos_trust"], src["qos_pfc"])
}

func joinSources(a, b string) string {
	switch {
	case a == "" || a == b:
		return b
	case b == "":
		return a
	}
	return a + ", " + b
}

// ToProps turns a model struct into its D-Bus property map. Nil slices and
// maps become empty ones: D-Bus has no null and clients expect "as" to be [].
//
// Given the struct as a value (not a pointer), the map's values point into
// v's own copy: nothing is allocated per property but the map, so a server
// can keep the models and make the maps when a call asks for them.
func ToProps(v any) map[string]dbus.Variant {
	rv := reflect.ValueOf(v)
	fields := propFieldsOf(rv.Type())
	props := make(map[string]dbus.Variant, len(fields))
	for _, pf := range fields {
		f := rv.Field(pf.index)
		switch {
		case f.Kind() == reflect.Slice && f.IsNil():
			props[pf.name] = pf.empty // shared: no one appends to a reply
			continue
		case f.Kind() == reflect.Map && f.IsNil():
			f = reflect.MakeMap(f.Type())
		}
		if pf.convert != nil {
			f = f.Convert(pf.convert)
		}
		props[pf.name] = dbus.MakeVariantWithSignature(f.Interface(), pf.sig)
	}
	return props
}

// propField is a field of a model struct that is a property.
type propField struct {
	name    string
	index   int
	sig     dbus.Signature
	convert reflect.Type // the type its value is converted to first; nil: none
	empty   dbus.Variant // a slice field's value when it is nil: an empty one
}

// propFields are the property fields of each model type, found once.
var propFields sync.Map // reflect.Type -> []propField

var prioritiesType, bytesType = reflect.TypeOf(Priorities(nil)), reflect.TypeOf([]byte(nil))

func propFieldsOf(t reflect.Type) []propField {
	if fs, ok := propFields.Load(t); ok {
		return fs.([]propField)
	}
	var fs []propField
	for i := 0; i < t.NumField(); i++ {
		name := t.Field(i).Tag.Get("prop")
		if name == "" {
			continue
		}
		ft := t.Field(i).Type
		pf := propField{name: name, index: i, sig: dbus.SignatureOfType(ft)}
		if ft == prioritiesType {
			pf.convert = bytesType // "ay" comes back as []byte
		}
		if ft.Kind() == reflect.Slice {
			empty := reflect.MakeSlice(ft, 0, 0)
			if pf.convert != nil {
				empty = empty.Convert(pf.convert)
			}
			pf.empty = dbus.MakeVariantWithSignature(empty.Interface(), pf.sig)
		}
		fs = append(fs, pf)
	}
	propFields.Store(t, fs)
	return fs
}

// FromProps fills the model struct pointed to by dst from a property map.
// Missing properties stay zero (an older daemon); a property of the wrong
// type is an error naming it.
func FromProps(props map[string]dbus.Variant, dst any) error {
	rv := reflect.ValueOf(dst).Elem()
	rt := rv.Type()
	for i := 0; i < rt.NumField(); i++ {
		name := rt.Field(i).Tag.Get("prop")
		v, ok := props[name]
		if name == "" || !ok {
			continue
		}
		f := rv.Field(i)
		if err := dbus.Store([]any{v.Value()}, f.Addr().Interface()); err != nil {
			return fmt.Errorf("property %s (type %s): %w", name, v.Signature(), err)
		}
	}
	return nil
}

// Priorities are 802.1p priorities (0..7): "ay" on D-Bus, an array of
// numbers in JSON (not the base64 string encoding/json makes of bytes).
type Priorities []byte

// MarshalJSON implements json.Marshaler.
func (p Priorities) MarshalJSON() ([]byte, error) {
	n := make([]int, len(p))
	for i, v := range p {
		n[i] = int(v)
	}
	return json.Marshal(n)
}

// UnmarshalJSON implements json.Unmarshaler.
func (p *Priorities) UnmarshalJSON(b []byte) error {
	var n []uint8
	var ints []int
	if err := json.Unmarshal(b, &ints); err != nil {
		return err
	}
	for _, v := range ints {
		if v < 0 || v > 255 {
			return fmt.Errorf("priority %d out of range", v)
		}
		n = append(n, uint8(v))
	}
	*p = n
	return nil
}

// QoSKeepPFC, as the only element of SetQoS's pfc, keeps PFC as declared.
const QoSKeepPFC = 255

// MaxPort is the largest port number rdmad accepts (the kernel's are u32,
// real devices have one or two).
const MaxPort = 1 << 16

// Description is the document Describe returns and `rdmactl -o json
// status` prints as is: the Manager properties, every device with its
// ports, the runtime overlay, and the actions of the last pass over each
// part of the host.
type Description struct {
	Manager
	Devices []Device      `json:"devices"`
	Runtime *RuntimeState `json:"runtime,omitempty"`
	Actions []Action      `json:"actions"`
	// Changes are the declarations in force made over D-Bus, at runtime
	// or persisted in rdmad's drop-in, with who made each and when.
	Changes []Change `json:"changes"`
}

// Change is one declaration in force made over D-Bus (rdmactl, Cockpit,
// busctl): a runtime one or an entry of rdmad's drop-in.
type Change struct {
	Kind   string `json:"kind"`   // "roce", "qos", "link", "netns"
	Target string `json:"target"` // "mlx5_0/1", "mlx5_0" (every port), a link's name; "" for netns
	// Values is what it declares, keys and values as rdmad.toml writes
	// them: `mode = "v2", tos = 106`.
	Values string `json:"values"`
	Source string `json:"source"` // "runtime", or rdmad's drop-in's file:line
	// By is who made it ("root (uid 0), pid 4242 busctl,
	// session-3.scope"), At when (µs since the epoch); "" and 0 when
	// rdmad does not know (an entry written before rdmad kept it).
	By string `json:"by"`
	At uint64 `json:"at_usec"`
}

// RuntimeState is the runtime overlay in Describe.
type RuntimeState struct {
	RoCE         []RuntimeRoCE `json:"roce"`
	QoS          []RuntimeQoS  `json:"qos"`
	Links        []Link        `json:"links"`
	DeletedLinks []string      `json:"deleted_links"`
	NetnsMode    string        `json:"netns_mode"`
}

// RuntimeRoCE is one runtime RoCE setting.
type RuntimeRoCE struct {
	Device string `json:"device"`
	Port   int    `json:"port"`
	Mode   string `json:"mode"`
	TOS    int    `json:"tos"`
}

// RuntimeQoS is one runtime [[qos]] setting (SetQoS without persist).
type RuntimeQoS struct {
	Device string     `json:"device"`
	Port   int        `json:"port"`
	Trust  string     `json:"trust"`   // "" when not set
	PFC    Priorities `json:"pfc"`     // with PFCSet
	PFCSet bool       `json:"pfc_set"` // false: PFC not set
	// Settings are the other [[qos]] keys set (SetQoSSettings), with
	// their values as rdmad.toml writes them.
	Settings map[string]string `json:"settings,omitempty"`
}

// Subject says what an action or a finding is about.
type Subject struct {
	Kind   string `json:"kind"` // "host", "device", "port", "link", "netdev"
	Device string `json:"device,omitempty"`
	Port   uint32 `json:"port,omitempty"`
	Link   string `json:"link,omitempty"`
	Netdev string `json:"netdev,omitempty"`
}

// String is the subject as rdmactl shows it: "host", "mlx5_0",
// "mlx5_0/1", "link rxe0", "netdev ib0".
func (s Subject) String() string {
	switch s.Kind {
	case "device":
		return s.Device
	case "port":
		return fmt.Sprintf("%s/%d", s.Device, s.Port)
	case "link":
		return "link " + s.Link
	case "netdev":
		return "netdev " + s.Netdev
	}
	return s.Kind
}

// Action is one action of a reconcile pass.
type Action struct {
	Subject Subject `json:"subject"`
	Kind    string  `json:"kind"` // what was done: "roce mode", "load", "soft link", ...
	From    string  `json:"from"`
	To      string  `json:"to"`
	Status  string  `json:"status"` // unchanged, changed, failed, not-applicable, pending
	Error   string  `json:"error,omitempty"`
	Source  string  `json:"source,omitempty"`
}

// The model's lists are JSON arrays, never null: an empty list is [] for
// every client (jq's .devices[] on null fails), in rdmad's Describe and in
// rdmactl's output alike. Each type with list fields marshals a copy whose
// nil lists are empty ones (the value marshalled is not changed).

// MarshalJSON writes nil lists as [].
func (d Description) MarshalJSON() ([]byte, error) {
	type plain Description
	c := plain(d)
	emptyLists(reflect.ValueOf(&c).Elem())
	return json.Marshal(c)
}

// MarshalJSON writes nil lists as [].
func (d Device) MarshalJSON() ([]byte, error) {
	type plain Device
	c := plain(d)
	emptyLists(reflect.ValueOf(&c).Elem())
	return json.Marshal(c)
}

// MarshalJSON writes nil lists as [].
func (p Port) MarshalJSON() ([]byte, error) {
	type plain Port
	c := plain(p)
	emptyLists(reflect.ValueOf(&c).Elem())
	return json.Marshal(c)
}

// MarshalJSON writes nil lists as [].
func (r RuntimeState) MarshalJSON() ([]byte, error) {
	type plain RuntimeState
	c := plain(r)
	emptyLists(reflect.ValueOf(&c).Elem())
	return json.Marshal(c)
}

// emptyLists sets the nil slice and map fields of the struct v (and of the
// structs it embeds) to empty ones.
func emptyLists(v reflect.Value) {
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		switch {
		case f.Kind() == reflect.Slice && f.IsNil() && f.CanSet():
			f.Set(reflect.MakeSlice(f.Type(), 0, 0))
		case f.Kind() == reflect.Map && f.IsNil() && f.CanSet():
			f.Set(reflect.MakeMap(f.Type())) // Port.Drift: {} as on the bus
		case f.Kind() == reflect.Struct && v.Type().Field(i).Anonymous:
			emptyLists(f)
		}
	}
}
