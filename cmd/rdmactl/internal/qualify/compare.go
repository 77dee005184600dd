package qualify

import (
	"fmt"
	"time"
)

// Tables are rdmad's tables a qualification is held to: how a change of
// each setting reaches rdmad (the Manager's Notifications) and what a
// change does to traffic (its Disruptions), per driver. A table rdmad did
// not give is nil, with why in its Missing.
type Tables struct {
	Notifications        []NoticeRow
	NotificationsMissing string
	Disruptions          []DisruptionRow
	DisruptionsMissing   string
}

// NoticeRow is a row of rdmad's notification table ("" driver: every
// driver without a row of its own).
type NoticeRow struct{ Driver, Setting, Notice string }

// DisruptionRow is a row of rdmad's table of changes that interrupt
// traffic: Effect "none", "link-toggle", "queue-reset", "device-reset".
type DisruptionRow struct{ Driver, Setting, Effect, When string }

func (r NoticeRow) String() string {
	d := r.Driver
	if d == "" {
		d = "every driver"
	}
	return fmt.Sprintf("%s %s %s", d, r.Setting, r.Notice)
}

func (r DisruptionRow) String() string { return fmt.Sprintf("%s %s %s", r.Driver, r.Setting, r.Effect) }

// taken says the write went through, so what followed it can be judged.
func (r Result) taken() bool {
	switch r.Result {
	case Works, NoNotification, InterruptsTraffic, Ignored:
		return true
	}
	return false
}

// Compare holds every result of rep to t: a result that disagrees with a
// row says so, naming the row (Result.Disagrees). It returns what could
// not be compared, for the report's end.
func Compare(rep *Report, t Tables, wait time.Duration) []string {
	var notes []string
	if t.Notifications == nil && t.NotificationsMissing != "" {
		notes = append(notes, "notifications not compared with rdmad's table: "+t.NotificationsMissing)
	}
	if t.Disruptions == nil && t.DisruptionsMissing != "" {
		notes = append(notes, "link changes not compared with rdmad's table of changes that interrupt traffic: "+t.DisruptionsMissing)
	}
	for i := range rep.Ports {
		p := &rep.Ports[i]
		for j := range p.Results {
			r := &p.Results[j]
			if !r.taken() {
				continue
			}
			if t.Notifications != nil {
				r.Disagrees = append(r.Disagrees, compareNotice(p.Driver, *r, t.Notifications, wait)...)
			}
			if t.Disruptions != nil {
				r.Disagrees = append(r.Disagrees, compareDisruption(p.Driver, *r, t.Disruptions)...)
			}
		}
	}
	return notes
}

func compareNotice(driver string, r Result, table []NoticeRow, wait time.Duration) []string {
	row, ok := noticeRow(table, driver, r.Setting)
	switch {
	case !ok:
		return []string{fmt.Sprintf("rdmad's notification table has no row for %s on %s", r.Setting, driver)}
	case row.Notice == "none" && r.Notified:
		return []string{fmt.Sprintf("notification table row %q: a %s notification came %s after the write; rdmad waits for its verify read-back instead",
			row.String(), r.Notice, ms(r.NotificationMS))}
	case row.Notice != "none" && row.Notice != r.Notice:
		return []string{fmt.Sprintf("notification table row %q: qualify watched for %s", row.String(), r.Notice)}
	case row.Notice != "none" && !r.Notified:
		return []string{fmt.Sprintf("notification table row %q: no %s notification came within %s; rdmad sees such a change only at its verify read-back",
			row.String(), row.Notice, wait)}
	}
	return nil
}

func noticeRow(table []NoticeRow, driver, setting string) (NoticeRow, bool) {
	var every NoticeRow
	found := false
	for _, r := range table {
		if r.Setting != setting {
			continue
		}
		if r.Driver == driver {
			return r, true
		}
		if r.Driver == "" {
			every, found = r, true
		}
	}
	return every, found
}

func compareDisruption(driver string, r Result, table []DisruptionRow) []string {
	var row DisruptionRow
	found := false
	for _, d := range table {
		if d.Driver == driver && d.Setting == r.Setting {
			row, found = d, true
		}
	}
	switch {
	case !found && r.LinkToggled:
		return []string{fmt.Sprintf("rdmad's table of changes that interrupt traffic has no row for %s on %s, and the link went down for %s",
			r.Setting, driver, ms(r.LinkDownMS))}
	case !found:
		return nil
	case row.Effect == "link-toggle" && !r.LinkToggled:
		return []string{fmt.Sprintf("disruption table row %q: the link stayed up", row.String())}
	case row.Effect != "link-toggle" && r.LinkToggled:
		return []string{fmt.Sprintf("disruption table row %q: the link went down for %s", row.String(), ms(r.LinkDownMS))}
	}
	return nil
}
