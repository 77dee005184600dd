package reconcile

import (
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/rdmad/rdmad/daemon/config"
)

// A setting is one value a part keeps on one subject: the RoCE TOS of a
// port, the PFC of its netdev, a file rdmad writes. Its part describes it
// once (a Setting, reached through a typed Handle) and, for every subject
// it judges in a pass, produces one Record: the declared value with its
// file:line, the value the kernel holds (typed, parsed where it was read),
// and whether it holds or why it does not apply. Whether a setting holds
// is decided there, once; the bus, the metrics, doctor, Cockpit and
// rdmactl only read records, and the service learns whether a call took
// from them (Report.Outcome). No package but the part names its settings.

// Value is a value of a setting in its part's own type (a RoCE mode, a
// TOS, a set of PFC priorities, a file's content).
type Value interface {
	// String is the value as reports, logs, doctor, rdmactl and Cockpit
	// show it.
	String() string
}

// Wired is a Value that D-Bus properties of its own carry (the contract's
// Port.RoCETOS and DesiredRoCETOS, from before settings were published
// generically): Wire gives it in the Go type of the property for the
// kernel's value, or of the one for the declared value (declared).
// Settings published only generically need not implement it.
type Wired interface {
	Value
	Wire(declared bool) any
}

// Setting describes one kind of setting; its part declares it once with
// NewSetting.
//
// A setting is spelled once for each of four readers, and each spelling
// is used for that reader only (all four are published, so none changes):
//
//   - Name ("roce_tos") is its identifier for programs: metric labels,
//     D-Bus keys and Setting.Name, found.json, doctor's finding ids.
//     The daemon's code tells one setting from another by the *Setting (or
//     its Handle), never by a string.
//   - Key ("roce.tos") is where the configuration declares it; several
//     settings may share one (both memlock files come from [memlock]).
//   - Title ("RoCE TOS") is its name in sentences for operators: errors,
//     doctor's messages, D-Bus Setting.Title, rdmactl's tables.
//   - Kind ("roce tos") is the kind of the actions that set it, as every
//     action of a pass has one (making a directory, loading modules): the
//     label of its Actions in Reconcile's and Plan's replies and the
//     journal. It routes an action to its part's Undo.
type Setting struct {
	// Name identifies the setting everywhere it is published: the
	// "setting" label of rdmad_port_drift and rdmad_host_drift, the key of
	// Port.Drift, doctor's finding id (roce_tos: roce-tos-differs), the
	// key of found.json. Lower case and underscores; unique.
	Name string
	// Kind is the kind of the actions that set it (Action.Kind); unique
	// among every part's kinds.
	Kind Kind
	// Key is what declares it in the files (roce.tos).
	Key config.Key
	// Title names it for operators, in sentences: "RoCE TOS".
	Title string
	// Gauge, when set, publishes the kernel's value of every subject
	// whose record holds one, declared or not (rdmad_port_roce_tos).
	Gauge *Gauge
	// Tools are the commands other managers set it with (cma_roce_tos,
	// mlnx_qos...): doctor names a systemd unit that runs one as the
	// likely other manager of a setting rdmad keeps putting back.
	Tools []string
	// Valid is the rule a value read back from found.json must pass
	// before rdmad puts it back (ValueRule makes one from a typed
	// func): the rule a configuration value of the setting passes
	// (daemon/config/value), and for a file, that its lines are what its
	// part renders (CheckRendered). found.json is root's, but rdmad
	// writes what it holds to the kernel and to limits.d and modprobe.d:
	// a TOS of 999 or an "install" line must never get there. Every
	// setting of rdmad's parts has one (a test holds them to it).
	Valid func(Value) error

	// decode reads a value of the setting's type back from found.json.
	decode func([]byte) (Value, error)
}

// ValueRule is a Setting's Valid made of a rule on its own value type.
func ValueRule[V Value](rule func(V) error) func(Value) error {
	return func(v Value) error {
		t, ok := v.(V)
		if !ok {
			return fmt.Errorf("%T is not a value of the setting (%T)", v, t)
		}
		return rule(t)
	}
}

// Gauge is a metric that publishes a setting's observed value.
type Gauge struct {
	Name, Help string
	// Label, when set, makes an info gauge: the value's String goes in
	// this label and the sample is 1. Otherwise the value's Wire must be
	// a number, which is the sample.
	Label string
	// Sample, when set, gives the sample of an observed value instead
	// of Label and Wire: labels after device and port, and the value. It
	// keeps label values bounded (a QoS value names its netdev and a
	// trust, never free text).
	Sample func(Value) GaugeSample
	// Policy adds a "policy" label, the record's state ("undeclared",
	// "holds", "differs"...): one series says both the kernel's value
	// and whether it is the declared one.
	Policy bool
}

// GaugeSample is one sample of a Gauge's Sample.
type GaugeSample struct {
	// Labels are name, value pairs; the values are escaped by the
	// writer.
	Labels []string
	Value  uint64
}

// Handle is the typed handle of one setting: its part builds actions and
// records with it, and reads their values back with it (Undo, checks), so
// the compiler checks that a setting's values always have its type.
type Handle[V Value] struct{ s *Setting }

// NewSetting declares a setting whose values are of type V.
func NewSetting[V Value](s Setting) Handle[V] {
	if s.Name == "" || s.Kind == "" || s.Key == "" {
		panic(fmt.Sprintf("reconcile: setting %+v needs a name, a kind and a key", s))
	}
	if err := foundable(reflect.TypeFor[V](), reflect.TypeFor[V]().String(), map[reflect.Type]bool{}); err != nil {
		panic(fmt.Sprintf("reconcile: setting %s: its value cannot be recorded in found.json: %v", s.Name, err))
	}
	s.decode = func(b []byte) (Value, error) {
		var v V
		err := json.Unmarshal(b, &v)
		return v, err
	}
	return Handle[V]{s: &s}
}

// foundable reports why a value of type t would not survive encoding/json
// whole: found.json keeps the value rdmad found in its setting's own type,
// and a field the encoder skips would be put back as its zero.
func foundable(t reflect.Type, path string, seen map[reflect.Type]bool) error {
	if seen[t] {
		return nil
	}
	seen[t] = true
	if t.Implements(reflect.TypeFor[json.Marshaler]()) != reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		return fmt.Errorf("%s has one of MarshalJSON and UnmarshalJSON", path)
	}
	if t.Implements(reflect.TypeFor[json.Marshaler]()) {
		return nil // the type says how it round-trips
	}
	switch t.Kind() {
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() || f.Tag.Get("json") == "-" {
				return fmt.Errorf("%s.%s is not encoded", path, f.Name)
			}
			if err := foundable(f.Type, path+"."+f.Name, seen); err != nil {
				return err
			}
		}
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return foundable(t.Elem(), path+"[]", seen)
	case reflect.Map:
		if err := foundable(t.Key(), path+" key", seen); err != nil {
			return err
		}
		return foundable(t.Elem(), path+"[]", seen)
	case reflect.Interface, reflect.Func, reflect.Chan, reflect.UnsafePointer, reflect.Complex64, reflect.Complex128:
		return fmt.Errorf("%s is a %s", path, t.Kind())
	}
	return nil
}

// Setting is what the handle describes.
func (h Handle[V]) Setting() *Setting { return h.s }

// Kind is the kind of the setting's actions.
func (h Handle[V]) Kind() Kind { return h.s.Kind }

// Is reports whether r is a record of this setting.
func (h Handle[V]) Is(r Record) bool { return r.Setting == h.s }

// Declared is the declared value of r, when r is this setting's and
// declares one.
func (h Handle[V]) Declared(r Record) (V, bool) {
	v, ok := r.Declared.(V)
	return v, ok && r.Setting == h.s
}

// Observed is the kernel's value in r, when r is this setting's and the
// value was read.
func (h Handle[V]) Observed(r Record) (V, bool) {
	v, ok := r.Observed.(V)
	return v, ok && r.Setting == h.s
}

// Old is the value an action of this setting found.
func (h Handle[V]) Old(a Action) (V, bool) {
	v, ok := a.Old.(V)
	return v, ok && a.Setting == h.s
}

// New is the value an action of this setting set or checked.
func (h Handle[V]) New(a Action) (V, bool) {
	v, ok := a.New.(V)
	return v, ok && a.Setting == h.s
}

// RecordState says whether a setting holds on its subject.
type RecordState uint8

const (
	// Undeclared: no rule declares it; the record publishes the
	// kernel's value.
	Undeclared RecordState = iota
	// Holds: the kernel holds the declared value.
	Holds
	// Differs: the kernel holds another value and rdmad did not write
	// it (an out-of-band change reported under [drift] action =
	// "report", another agent owning the setting, a plan).
	Differs
	// Refused: writing the declared value failed or did not stick, or
	// the subject cannot take it (a netdev without DCB).
	Refused
	// Unknown: the kernel's value could not be read.
	Unknown
	// Contested: another manager keeps changing it; rdmad stopped
	// correcting it for a while.
	Contested
	// Deferred: the running kernel could not take it now; it applies at
	// the next boot.
	Deferred
	// Inapplicable: declared, but it does not apply to this subject
	// (RoCE settings on an InfiniBand port); Why says why.
	Inapplicable
)

var recordStates = [...]string{"undeclared", "holds", "differs", "refused", "unknown", "contested", "deferred", "not-applicable"}

func (s RecordState) String() string {
	if int(s) < len(recordStates) {
		return recordStates[s]
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// Record is one setting of one subject after the last read of it.
type Record struct {
	Subject  Subject
	Setting  *Setting
	Declared Value           // nil when no rule declares it
	Source   config.Position // where the declared value comes from
	Observed Value           // nil when the kernel's value is not known
	State    RecordState
	// Corrected is how many times rdmad put the setting back on its
	// subject since it started (out-of-band changes corrected); the
	// reconciler sets it, not the part.
	Corrected uint32
	Why       error  // why it does not hold, or does not apply
	Fix       string // what an operator does when it does not hold ("" : rdmactl reconcile)
	// Watch lists directories (relative to the host root) whose change
	// may change the setting: rdmad watches them and reads the setting
	// again when one changes.
	Watch []string
}

// IsDeclared reports whether a rule declares the setting on the subject.
func (r Record) IsDeclared() bool { return r.State != Undeclared }

// Applies reports whether the setting is declared and applies to the
// subject.
func (r Record) Applies() bool { return r.State != Undeclared && r.State != Inapplicable }

// Drifted reports whether a declared setting that applies does not hold:
// what rdmad_port_drift, Port.Drift and doctor report.
func (r Record) Drifted() bool { return r.Applies() && r.State != Holds }

// WhyText is Why as text ("" when there is none).
func (r Record) WhyText() string {
	if r.Why == nil {
		return ""
	}
	return r.Why.Error()
}

// Text is a value as shown; "" for none.
func Text(v Value) string {
	if v == nil {
		return ""
	}
	return v.String()
}

// WriteGuard is what a part asks the pass it runs in.
type WriteGuard interface {
	// Hold says why setting s of subject must not be written to want now,
	// nil when it may. A setting whose last record held the same
	// declaration has changed behind rdmad's back: under [drift] action =
	// "report" it is not written back, and while another manager
	// contests it rdmad stops correcting it. state is what the record
	// then says.
	Hold(subject Subject, s *Setting, want Value, src config.Position) (state RecordState, why error)
	// ReadOnly says the pass writes nothing at all (a plan, doctor's
	// view of a host): parts then make no directory, load no module and
	// remove no file either.
	ReadOnly() bool
}

// BackoffGuard is a WriteGuard that holds back reads too: a setting in a contest's
// back-off is not read again until the back-off ends (another manager
// writing it thousands of times a second made rdmad read it after every
// write). Backoff returns the setting's last record, which stands.
type BackoffGuard interface {
	WriteGuard
	Backoff(subject Subject, s *Setting, want Value, src config.Position) (Record, bool)
}

// Target is one declared setting of one subject, with how to read and
// write it: what Handle.Converge brings to its declared value (read,
// compare, write if the guard lets it, read back).
type Target[V Value] struct {
	Subject Subject
	Want    V
	Source  config.Position
	// Read reads the kernel's value now.
	Read func() (V, error)
	// Write sets want; Converge reads it back with Read.
	Write func(want V) error
	// Holds compares what the kernel holds with the declared value; nil:
	// equal values (reflect.DeepEqual).
	Holds func(have, want V) bool
	// Hold, when set, keeps the part from writing (another agent owns
	// the setting): a value that does not hold is recorded as Differs,
	// with Hold as the reason.
	Hold error
	// Cost is how many corrections one write counts for when rdmad
	// judges whether a setting is contested (mlx5 toggles the link on a
	// PFC change: 2); 0 counts 1.
	Cost  int
	Watch []string
	Fix   string
}

// Converge brings target c to its declared value, writing only where guard
// (nil: none) lets it, and returns the pass's action and the setting's
// record.
func (h Handle[V]) Converge(guard WriteGuard, c Target[V]) (Action, Record) {
	act := Action{Subject: c.Subject, Kind: h.s.Kind, Setting: h.s, To: c.Want.String(), New: c.Want, Source: c.Source.String(), Cost: c.Cost}
	rec := Record{Subject: c.Subject, Setting: h.s, Declared: c.Want, Source: c.Source, Fix: c.Fix, Watch: c.Watch}
	holds := c.Holds
	if holds == nil {
		holds = func(a, b V) bool { return reflect.DeepEqual(a, b) }
	}
	if br, ok := guard.(BackoffGuard); ok && c.Hold == nil {
		if last, held := br.Backoff(c.Subject, h.s, c.Want, c.Source); held {
			act.Status, act.Err = Held, last.Why
			if last.State == Holds {
				act.Status = Unchanged
			}
			if last.Observed != nil {
				act.From = last.Observed.String()
			}
			rec.State, rec.Why, rec.Observed = last.State, last.Why, last.Observed
			return act, rec
		}
	}
	have, err := c.Read()
	if err != nil {
		act.Status, act.Err = Failed, err
		rec.State, rec.Why = Unknown, err
		return act, rec
	}
	act.From, act.Old, rec.Observed = have.String(), have, have
	if holds(have, c.Want) {
		act.Status, rec.State = Unchanged, Holds
		return act, rec
	}
	hold, why := Differs, c.Hold
	if why == nil && guard != nil {
		hold, why = guard.Hold(c.Subject, h.s, c.Want, c.Source)
	}
	if why != nil {
		act.Status, act.Err = Held, why
		rec.State, rec.Why = hold, why
		return act, rec
	}
	if err := c.Write(c.Want); err != nil {
		act.Status, act.Err = Failed, err
		rec.State, rec.Why = Refused, err
		if now, rerr := c.Read(); rerr == nil {
			rec.Observed = now
		}
		return act, rec
	}
	got, err := c.Read()
	if err != nil {
		err = fmt.Errorf("read back %s of %s: %w", h.s.Title, c.Subject, err)
		act.Status, act.Err = Failed, err
		rec.State, rec.Observed, rec.Why = Unknown, nil, err
		return act, rec
	}
	rec.Observed = got
	if !holds(got, c.Want) {
		err := &NotKeptError{fmt.Sprintf("%s: wrote %s %s but the kernel kept %s", c.Subject, h.s.Title, c.Want, got)}
		act.Status, act.Err = Failed, err
		rec.State, rec.Why = Refused, err
		return act, rec
	}
	act.Status, rec.State = Changed, Holds
	return act, rec
}

// NotKeptError is a write the kernel took but whose read-back shows
// another value: the driver kept its own, or another process wrote in
// between (a fight over the setting, which the contest rule counts).
type NotKeptError struct{ msg string }

func (e *NotKeptError) Error() string { return e.msg }

// Refuse records a declared setting the part could not even try to set
// (the device's configfs directory cannot be made, the port has no
// netdev): a failed action and a Refused record.
func (h Handle[V]) Refuse(subject Subject, want V, src config.Position, err error) (Action, Record) {
	return Action{Subject: subject, Kind: h.s.Kind, Setting: h.s, To: want.String(), New: want, Source: src.String(), Status: Failed, Err: err},
		Record{Subject: subject, Setting: h.s, Declared: want, Source: src, State: Refused, Why: err}
}

// NotApplicable records a declared setting that does not apply to the
// subject, and why.
func (h Handle[V]) NotApplicable(subject Subject, want V, src config.Position, why error) (Action, Record) {
	return Action{Subject: subject, Kind: h.s.Kind, Setting: h.s, To: want.String(), New: want, Source: src.String(), Status: NotApplicable, Err: why},
		Record{Subject: subject, Setting: h.s, Declared: want, Source: src, State: Inapplicable, Why: why}
}

// Observe records the kernel's value of a setting no rule declares, as
// the daemon publishes it; an error records the value as unknown.
func (h Handle[V]) Observe(subject Subject, have V, err error) Record {
	r := Record{Subject: subject, Setting: h.s, State: Undeclared}
	if err == nil {
		r.Observed = have
	} else {
		r.Why = err
	}
	return r
}
