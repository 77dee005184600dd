package bus

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/dbusapi"
)

// planSlots bounds the plans worked out at once. Plan is open to every
// local user and reads every device (on a host with a thousand, as much
// as a full pass, on one CPU). A uid other than root has one plan at a
// time, however many connections it opens, and such uids hold at most
// planSlots-1 in all: one slot is always root's, so one user can never
// make another Busy, nor keep root's (Ansible's check mode) from planning;
// others are Busy only once planSlots-1 distinct users plan at once. A
// call that finds no slot is told Busy at once rather than queued. A slot
// is held by the plan's work, not by the call: a plan whose read does not
// answer keeps it after its call failed, until the read returns, so reads
// that hang never pile up beyond planSlots.
const (
	planSlots       = 4
	planSlotsPerUID = 1
	planRootSlots   = 1
)

// planTimeout bounds a plan's call. A plan reads what a full pass reads
// (0.2 to 0.5 s at 1,024 devices, docs/performance.md): only a kernel read that
// does not answer, or a host starved of CPU, comes near it. It is below
// the 25 s a D-Bus client waits by default (rdmactl's read timeout too),
// so the caller gets an error naming the step, not NoReply.
const planTimeout = 20 * time.Second

// Plan is open to everyone, like reading properties: it changes nothing
// and opens no path the caller gives.
func (m *manager) Plan(msg dbus.Message, candidate []byte, as string) (string, *dbus.Error) {
	check := func() error { return m.s.svc.CheckPlan(candidate, as) }
	_, e := m.admit(msg, "Plan", call{check: check})
	if e != nil {
		return "", e
	}
	uid, err := m.s.callerUID(msg)
	if err != nil {
		return "", dbus.NewError(dbusapi.ErrFailed, []any{dbusapi.Escape("Plan: " + err.Error())})
	}
	release, err := m.s.plans.take(uid)
	if err != nil {
		m.s.refuse(msg, "Plan", ReasonBusy, "call refused", "err", err)
		return "", busy(err.Error())
	}
	timeout := planTimeout
	h := m.s.hook()
	if h != nil && h.planTimeout > 0 {
		timeout = h.planTimeout
	}
	var step atomic.Pointer[string]
	p, err := untilDeadline(timeout, release, func(ctx context.Context) (service.Plan, error) {
		if h != nil && h.inPlan != nil {
			h.inPlan()
		}
		return m.s.svc.Plan(ctx, candidate, as, func(s string) { step.Store(&s) })
	})
	if errors.Is(err, context.DeadlineExceeded) {
		at := "start"
		if s := step.Load(); s != nil {
			at = *s
		}
		return "", busy(fmt.Sprintf("Plan: not done within %s, at the step: %s; a kernel read does not answer or the host is overloaded: try again later", timeout, at))
	}
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
		if d := r.Disruption; d != nil {
			s.Disrupts, s.Disruption, s.DisruptionWhen = true, d.Effect.String(), d.When
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
