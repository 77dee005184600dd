package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// Plan is what a policy would do to the host, worked out without writing
// anything: the files in force, plus a candidate drop-in, loaded as a
// reload would load them, with the runtime overlay on top, and judged by
// the parts against what the kernel holds now (reconcile.Reconciler.Observe).
type Plan struct {
	// Err says why the planned files do not load (config.Error values,
	// each with its file:line); nothing else is set then.
	Err error
	// Files are the planned policy's files, in merge order.
	Files []string
	// Records are the settings the planned policy declares, and those the
	// policy in force declares that it no longer would, in pass order.
	Records []PlannedRecord
	// Steps are what the pass would do that keeps no setting of a record
	// (load modules, remove a file rdmad wrote): held, not done.
	Steps []reconcile.Action
}

// PlannedRecord is one setting of one subject under the planned policy.
type PlannedRecord struct {
	// Record is the setting as the planned policy's parts judge it now:
	// Declared is the value the policy would set, Observed what the
	// kernel holds now, State whether it holds (Differs with
	// reconcile.ErrReadOnly: it would be written).
	reconcile.Record
	// InForce is the setting's record after the last pass under the
	// policy in force, when it declared the setting (Setting nil
	// otherwise).
	InForce reconcile.Record
	// PutBack, for a setting the planned policy would no longer declare,
	// is the value rdmad found before its first change this boot, which
	// the pass would put back; "" when none is recorded (the kernel's
	// value then stays).
	PutBack string
	// Disruption, when the pass would write the setting and its part's
	// table says the change interrupts traffic on the subject's driver,
	// is that row (reconcile.Disruption); nil otherwise.
	Disruption *reconcile.Disruption
}

// Writes reports whether a pass under the planned policy would write the
// setting: a declared value the kernel does not hold, or a released one
// whose value found differs from the kernel's.
func (p PlannedRecord) Writes() bool {
	if p.Released() {
		return p.PutBack != "" && p.PutBack != reconcile.Text(p.Observed)
	}
	return p.State == reconcile.Differs && errors.Is(p.Why, reconcile.ErrReadOnly)
}

// Released reports whether the policy in force declares the setting and
// the planned one would not.
func (p PlannedRecord) Released() bool { return !p.IsDeclared() && p.InForce.IsDeclared() }

// Plan works out what the configuration files would do with candidate in
// the drop-in directory under the name as (replacing a drop-in of that
// name); as "" plans the files as they are (candidate must be empty
// then). Nothing is written, no file is created and no path a caller
// gives is opened: candidate is the file's content. The candidate goes
// through the loader exactly as a file does (the nesting check before any
// TOML parser, strict keys, file:line errors). A plan reads every device
// beside the passes, not behind them, one device at a time
// (reconcile.Reconciler.ObserveSerially: at most one CPU). step,
// when not nil, is told each step as it starts; when ctx ends, the error
// names the step under way.
func (s *Service) Plan(ctx context.Context, candidate []byte, as string, step func(string)) (Plan, error) {
	if err := checkCandidate(candidate, as); err != nil {
		return Plan{}, err
	}
	var now string
	at := func(st string) {
		now = st
		if step != nil {
			step(st)
		}
	}
	at("load the configuration files")
	var r config.Reader = s.files()
	if as != "" {
		r = config.WithData(r, s.DropInDir(), candidate, as)
	}
	pol, err := config.Load(r, s.configFile)
	if err != nil {
		return Plan{Err: err}, nil
	}
	pol = s.RuntimeOverlay().Apply(pol)
	var inForce []reconcile.Record
	last := s.rec.Snapshot()
	if err := checkPlanWork(pol, &last); err != nil {
		return Plan{}, err
	}
	for _, r := range last.Records() {
		if r.IsDeclared() && r.Setting != nil {
			inForce = append(inForce, r)
		}
	}
	st := s.rec.ObserveSerially(ctx, pol, at)
	if err := ctx.Err(); err != nil {
		return Plan{}, fmt.Errorf("plan: %s: %w", now, err)
	}
	p := buildPlan(pol.Files, &st, inForce)
	for i, r := range p.Records {
		dev := deviceOf([]*reconcile.State{&st, &last}, r.Subject)
		if r.Released() {
			p.Records[i].PutBack, _ = s.rec.FoundText(r.Subject, r.Setting, dev)
		}
		p.Records[i].Disruption = s.disruption(p.Records[i], dev)
	}
	return p, nil
}

// disruption is the row of the parts' table for a change the plan would
// make to r on dev; nil when it makes none, or none that interrupts
// traffic. A released setting's value found is known as text only: its
// change counts as any change.
func (s *Service) disruption(r PlannedRecord, dev *host.Device) *reconcile.Disruption {
	if dev == nil || !r.Writes() {
		return nil
	}
	to := r.Declared
	if r.Released() {
		to = nil
	}
	d, ok := s.rec.Disruption(dev.Driver, r.Setting, r.Observed, to)
	if !ok {
		return nil
	}
	return &d
}

// deviceOf is the device of a port or device subject as the plan read it,
// else as the last pass did; nil for other subjects.
func deviceOf(states []*reconcile.State, s reconcile.Subject) *host.Device {
	if s.Kind != reconcile.SubjectPort && s.Kind != reconcile.SubjectDevice {
		return nil
	}
	for _, st := range states {
		if d := st.Device(s.Device); d != nil {
			return &d.Device
		}
	}
	return nil
}

// buildPlan lists the records of st that the planned policy declares,
// each with its record in force, then the settings of inForce that it
// would no longer declare (with the kernel's value st read, or else the
// last pass's), then the steps st holds that keep no setting.
func buildPlan(files []string, st *reconcile.State, inForce []reconcile.Record) Plan {
	out := Plan{Files: files}
	was := make(map[recordKey]reconcile.Record, len(inForce))
	for _, r := range inForce {
		was[recordKey{r.Subject, r.Setting}] = r
	}
	now := map[recordKey]reconcile.Record{}
	for _, r := range st.Records() {
		if r.Setting == nil {
			continue
		}
		k := recordKey{r.Subject, r.Setting}
		now[k] = r
		if r.IsDeclared() {
			out.Records = append(out.Records, PlannedRecord{Record: r, InForce: was[k]})
		}
	}
	for _, r := range inForce {
		k := recordKey{r.Subject, r.Setting}
		planned, seen := now[k]
		switch {
		case seen && planned.IsDeclared():
			continue
		case !seen:
			planned = reconcile.Record{Subject: r.Subject, Setting: r.Setting, State: reconcile.Undeclared, Observed: r.Observed}
		}
		out.Records = append(out.Records, PlannedRecord{Record: planned, InForce: r})
	}
	for _, a := range st.Actions() {
		if a.Status != reconcile.Held {
			continue
		}
		if _, ok := now[recordKey{a.Subject, a.Setting}]; a.Setting != nil && ok {
			continue
		}
		out.Steps = append(out.Steps, a)
	}
	return out
}

// MaxPlanGlobMatches bounds the pattern matches a plan makes: the rules
// whose selector has a pattern ([[roce]], [[qos]], [[vpi]] with a device
// glob, a pci or a netdev) times the ports of the host. A plan judges
// every port against every rule, and Plan takes candidates from any local
// user: 4,000 rules of long patterns made one plan burn a core for 20 s
// at 1,024 devices. Rules that name their devices exactly cost a
// comparison each and are not counted. At 2,048 ports the bound is 512
// rules with a pattern, about a second of one core.
const MaxPlanGlobMatches = 1 << 20

// checkPlanWork refuses a plan whose pattern matches would exceed
// MaxPlanGlobMatches on the ports of the host as the last pass saw it.
func checkPlanWork(pol *config.Policy, last *reconcile.State) error {
	ports := 0
	for i := range last.Devices {
		ports += len(last.Devices[i].Ports)
	}
	rules := pol.GlobRules()
	if rules*ports <= MaxPlanGlobMatches {
		return nil
	}
	return &ArgError{Arg: "candidate", Msg: fmt.Sprintf("the planned policy has %d rules with a pattern (device glob, pci or netdev) and the host %d ports: %d pattern matches, and a plan makes at most %d; name the devices exactly, or plan fewer rules at once",
		rules, ports, rules*ports, MaxPlanGlobMatches)}
}

// checkCandidate validates Plan's arguments.
func checkCandidate(candidate []byte, as string) error {
	switch {
	case len(candidate) > config.MaxCandidateSize:
		return &ArgError{Arg: "candidate", Msg: fmt.Sprintf("%d bytes; a drop-in has at most %d", len(candidate), config.MaxCandidateSize)}
	case as == "" && len(candidate) > 0:
		return &ArgError{Arg: "as", Msg: "empty; a candidate needs the drop-in name it stands for (NAME.toml)"}
	case as != "":
		if err := config.CheckDropInName(as); err != nil {
			return &ArgError{Arg: "as", Msg: err.Error()}
		}
	}
	return nil
}

// CheckPlan validates Plan's arguments without planning anything.
func (s *Service) CheckPlan(candidate []byte, as string) error { return checkCandidate(candidate, as) }

type recordKey struct {
	subject reconcile.Subject
	setting *reconcile.Setting
}
