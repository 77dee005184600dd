package doctor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rdmad/rdmad/daemon/reconcile"
)

// checkSettings: every declared setting that applies holds, as its part
// recorded it at the last read (the records say it once, for doctor, the
// bus and the metrics alike). A subject whose settings all hold is one ok
// finding; a setting that does not hold is a fail named after it
// (roce_tos: roce-tos-differs), or setting-contested while another manager
// keeps changing it.
func (d *diag) checkSettings() {
	if d.in.State == nil {
		return
	}
	var order []reconcile.Subject
	held := map[reconcile.Subject][]string{}
	judge := func(r reconcile.Record, stale bool) {
		if !r.Applies() {
			return
		}
		var byHold *reconcile.HeldError
		if r.Drifted() && !stale && errors.As(r.Why, &byHold) {
			return // a hold's finding says it (checkHolds)
		}
		if !r.Drifted() && !stale {
			if _, ok := held[r.Subject]; !ok {
				order = append(order, r.Subject)
			}
			held[r.Subject] = append(held[r.Subject], fmt.Sprintf("%s %s (%s)", r.Setting.Title, reconcile.Text(r.Observed), r.Source))
			return
		}
		d.settingFinding(r, stale)
	}
	for _, r := range d.in.State.HostRecords {
		if r.Subject.Kind != reconcile.SubjectPort {
			judge(r, false)
		}
	}
	for i := range d.in.State.Devices {
		ds := &d.in.State.Devices[i]
		for _, p := range ds.Ports {
			for _, r := range p.Records {
				judge(r, ds.ReadError != nil)
			}
		}
	}
	for _, s := range order {
		d.ok("policy-applied", subjectOf(s), s.String()+": as declared: "+strings.Join(held[s], ", "))
	}
	d.checkUndone()
	d.checkFights()
	d.checkHolds()
}

// checkHolds: a caller holds rdmad's corrections of settings of a port
// (HoldCorrections; rdmactl qualify does while it tries them): rdmad
// writes none of them until the hold ends. A warning for each hold, naming
// the holder and what a held declared setting holds now.
func (d *diag) checkHolds() {
	for _, h := range d.in.State.Holds {
		msg := fmt.Sprintf("%s: rdmad does not correct %s: held by %s since %s", h.Subject, strings.Join(h.SettingNames(), ", "), h.Holder, h.Since.Format(time.DateTime))
		var differs []string
		for _, r := range d.in.State.Records() {
			var held *reconcile.HeldError
			if r.Subject == h.Subject && r.Drifted() && errors.As(r.Why, &held) {
				differs = append(differs, fmt.Sprintf("%s is %s, declared %s at %s", r.Setting.Title, reconcile.Text(r.Observed), reconcile.Text(r.Declared), r.Source))
			}
		}
		if len(differs) > 0 {
			msg += " (" + strings.Join(differs, "; ") + ")"
		}
		d.warn("corrections-held", subjectOf(h.Subject), msg,
			"wait for the holder to finish (rdmactl qualify puts every value back and releases its hold); the hold ends when the holder leaves the bus, and rdmad then reads the port again")
	}
}

// checkUndone: a setting whose declaration went is put back to the value
// rdmad found before it changed it; one that could not be is a warning,
// reported once and not retried (the next boot gives the kernel's value).
// So is a record of those values (found.json) that rdmad cannot keep.
func (d *diag) checkUndone() {
	if err := d.in.State.FoundError; err != nil {
		d.warn("undo-partial", reconcile.HostSubject(),
			"the values rdmad found before it changed them cannot be kept: "+firstLine(err.Error())+"; a declaration removed now puts back only what rdmad found since it started, and nothing after a restart",
			"if the file is rdmad's record and an edit dropped its first line, put rdmad's header line back (rdmad(8) quotes it; rdmad uses the file again after its next pass); otherwise move the file away (rdmad writes a new one after its next pass); a failed save is tried again after every pass")
	}
	for _, e := range d.in.State.Unrestored {
		d.warn("undo-partial", subjectOf(e.Subject),
			fmt.Sprintf("%s: %s was not put back to %s, the value rdmad found before it changed it, when its declaration went: %s", e.Subject, e.Setting, e.Text, firstLine(e.Error)),
			"set it by hand if it matters (rdmad no longer declares it), or reboot; rdmad does not try again")
	}
}

// settingFinding is the finding of a declared setting that does not hold.
func (d *diag) settingFinding(r reconcile.Record, stale bool) {
	now := "unknown"
	if r.Observed != nil {
		now = r.Observed.String()
	}
	msg := fmt.Sprintf("%s: %s is %s, declared %s at %s", r.Subject, r.Setting.Title, now, reconcile.Text(r.Declared), r.Source)
	switch {
	case stale:
		msg += " (the device did not read at the last pass: its values are the last good ones)"
	case r.Why != nil && !errors.Is(r.Why, reconcile.ErrReadOnly):
		msg += ": " + firstLine(r.Why.Error())
	}
	fix := r.Fix
	if fix == "" {
		fix = "rdmactl reconcile (rdmad applies it again), and see rdmactl status"
	}
	id := strings.ReplaceAll(r.Setting.Name, "_", "-") + "-differs"
	switch r.State {
	case reconcile.Contested:
		id = "setting-contested"
		who := d.otherManager(r)
		if who != "" {
			msg += "; " + who + " also manages it"
		}
		if r.Fix == "" {
			if who == "" {
				who = "what else writes " + r.Setting.Title + " of " + r.Subject.String()
			}
			fix = "hand the setting to one manager (" + who + ", or rdmad); rdmad tries again after its back-off, and at rdmactl reconcile"
		}
	case reconcile.Deferred:
		if r.Fix == "" {
			fix = "it applies at the next boot; reboot to have it now"
		}
		d.warn(id, subjectOf(r.Subject), msg, fix)
		return
	}
	d.fail(id, subjectOf(r.Subject), msg, fix)
}

// otherManager is the manager a part's checks know writes r's setting
// (reconcile.Contender), or "".
func (d *diag) otherManager(r reconcile.Record) string {
	in := &reconcile.CheckInput{Host: d.h, Policy: d.pol, State: d.in.State}
	for _, c := range d.in.Checks {
		if ct, ok := c.(reconcile.Contender); ok {
			if who := ct.OtherManager(in, r); who != "" {
				return who
			}
		}
	}
	return ""
}

// checkParts runs the parts' own checks (reconcile.Checker).
func (d *diag) checkParts(ctx context.Context) {
	if d.in.State == nil {
		return
	}
	in := &reconcile.CheckInput{Host: d.h, Policy: d.pol, State: d.in.State}
	for _, c := range d.in.Checks {
		for _, n := range c.Check(ctx, in) {
			d.note(n)
		}
	}
}

// note records a part's note as a finding.
func (d *diag) note(n reconcile.Note) {
	d.add(severityOf(n.Severity), n.ID, subjectOf(n.Subject), n.Finding, n.Fix)
}

func severityOf(s reconcile.Severity) Severity {
	switch s {
	case reconcile.SeverityWarn:
		return SeverityWarn
	case reconcile.SeverityFail:
		return SeverityFail
	}
	return SeverityOK
}

// subjectOf is a typed subject as findings name it.
func subjectOf(s reconcile.Subject) reconcile.Subject {
	switch s.Kind {
	case reconcile.SubjectDevice:
		return deviceSubject(s.Device)
	case reconcile.SubjectPort:
		return portSubject(s.Device, s.Port)
	case reconcile.SubjectLink:
		return linkSubject(s.Link)
	case reconcile.SubjectNetdev:
		return netdevSubject(s.Netdev)
	}
	return hostSubject
}
