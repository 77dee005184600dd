package bus

import (
	"context"
	"errors"
	"fmt"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/dbusapi"
)

// planSlots bounds the plans worked out at once. Plan is open to every
// local user and reads every device (on a host with a thousand, as much
// as a full pass): a third caller is told Busy at once rather than queued,
// so plans never pile up behind the reconciler's lock.
const planSlots = 2

// Plan is open to everyone, like reading properties: it changes nothing
// and opens no path the caller gives.
func (m *manager) Plan(msg dbus.Message, candidate []byte, as string) (string, *dbus.Error) {
	check := func() error { return m.s.svc.CheckPlan(candidate, as) }
	if e := m.admit(msg, "Plan", call{check: check}); e != nil {
		return "", e
	}
	select {
	case m.s.plans <- struct{}{}:
		defer func() { <-m.s.plans }()
	default:
		return "", busy(fmt.Sprintf("Plan: %d plans are being worked out; try again later", planSlots))
	}
	if h := m.s.hook(); h != nil && h.inPlan != nil {
		h.inPlan()
	}
	p, err := m.s.svc.Plan(context.Background(), candidate, as)
	if err != nil {
		return "", busError(err)
	}
	doc, err := dbusapi.EncodePlan(planModel(p))
	if err != nil {
		return "", busError(err)
	}
	return doc, nil
}

// planModel is a plan as published, every string escaped (names and
// values read from the host, file names from the drop-in directory).
func planModel(p service.Plan) dbusapi.Plan {
	out := dbusapi.Plan{Loads: p.Err == nil, Files: append([]string{}, p.Files...)}
	if p.Err != nil {
		out.Files = nil
		for _, e := range config.Problems(p.Err) {
			cp := dbusapi.ConfigProblem{Problem: e.Error(), Text: e.Error()}
			var ce *config.Error
			if errors.As(e, &ce) {
				cp.File, cp.Line, cp.Key, cp.Problem = ce.Pos.File, ce.Pos.Line, ce.Key, ce.Msg
			}
			out.Problems = append(out.Problems, cp)
		}
	}
	for _, r := range p.Records {
		s := dbusapi.PlannedSetting{Subject: subjectModel(r.Subject), Name: r.Setting.Name, Title: r.Setting.Title,
			Now: reconcile.Text(r.Observed), Change: planChange(r), Why: r.WhyText()}
		if r.IsDeclared() {
			s.Planned, s.Source = reconcile.Text(r.Declared), r.Source.String()
		}
		if r.Released() {
			s.Planned = r.PutBack
		}
		if r.InForce.IsDeclared() {
			s.InForce, s.InForceSource = reconcile.Text(r.InForce.Declared), r.InForce.Source.String()
		}
		if s.Change == dbusapi.PlanSet {
			s.Why = "" // rdmad only reads here: the reason a plan writes nothing, not news
		}
		out.Settings = append(out.Settings, s)
	}
	for _, a := range p.Steps {
		out.Steps = append(out.Steps, dbusapi.PlannedStep{Subject: subjectModel(a.Subject), Kind: string(a.Kind),
			Now: a.From, Planned: a.To, Source: a.Source})
	}
	dbusapi.EscapeStrings(&out)
	return out
}

// planChange is what a pass under the planned policy would do to r.
func planChange(r service.PlannedRecord) string {
	switch {
	case r.Released():
		return dbusapi.PlanRelease
	case r.State == reconcile.Holds:
		return dbusapi.PlanNone
	case r.State == reconcile.Differs && errors.Is(r.Why, reconcile.ErrReadOnly):
		return dbusapi.PlanSet
	case r.State == reconcile.Differs || r.State == reconcile.Contested:
		return dbusapi.PlanHeld
	case r.State == reconcile.Unknown:
		return dbusapi.PlanUnknown
	case r.State == reconcile.Inapplicable:
		return dbusapi.PlanNotApplicable
	case r.State == reconcile.Deferred:
		return dbusapi.PlanNextBoot
	}
	return dbusapi.PlanRefused
}
