package doctor

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"time"
)

// checkFights: a setting rdmad keeps correcting (twice or more, each
// correction within [drift] fight_window of the one before) is a warning
// naming it, how many corrections (not link toggles), the first and the
// last, and, where rdmad can tell, the other manager: a systemd timer or
// service whose command runs one of the tools its part says set it
// (reconcile.Setting.Tools). It clears once a window passes without a
// correction. The unit files are read only while a setting is fought.
func (d *diag) checkFights() {
	if d.in.State == nil {
		return
	}
	var tools []string
	for _, f := range d.in.State.Fights {
		for _, t := range f.Setting.Tools {
			if !slices.Contains(tools, t) {
				tools = append(tools, t)
			}
		}
	}
	var units []fightUnit
	if len(tools) > 0 && len(d.in.State.Fights) > 0 {
		units = fightUnits(d, tools)
	}
	for _, f := range d.in.State.Fights {
		msg := fmt.Sprintf("%s: rdmad put %s back %d times, first at %s, last at %s, each within %s of the one before: something else sets it back",
			f.Subject, f.Setting.Title, f.Corrections, f.First.Format(time.DateTime+" MST"), f.Last.Format(time.DateTime+" MST"), f.Window)
		var who []string
		for _, u := range units {
			if slices.Contains(f.Setting.Tools, u.tool) {
				who = append(who, u.String())
			}
		}
		fix := fmt.Sprintf("find what else sets %s of %s and leave it to one manager (remove it from the other, or the declaration from rdmad); the warning clears after %s without a correction",
			f.Setting.Title, f.Subject, f.Window)
		if len(who) > 0 {
			msg += "; likely " + strings.Join(who, ", ")
			fix = "stop or change " + strings.Join(who, ", ") + ", or remove the declaration from rdmad; the warning clears after " + f.Window.String() + " without a correction"
		} else if len(f.Setting.Tools) > 0 {
			fix = fmt.Sprintf("look for a timer, cron job or script running %s, and leave %s to one manager; the warning clears after %s without a correction",
				strings.Join(f.Setting.Tools, ", "), f.Setting.Title, f.Window)
		}
		d.warn("setting-fought", subjectOf(f.Subject), msg, fix)
	}
}

// fightUnit is a systemd unit whose command runs a tool, started by a
// timer when one names it.
type fightUnit struct {
	service, timer, tool, command string
}

func (u fightUnit) String() string {
	if u.timer != "" {
		return fmt.Sprintf("%s (it starts %s, which runs %s)", u.timer, u.service, u.command)
	}
	return fmt.Sprintf("%s (it runs %s)", u.service, u.command)
}

// Bounds of the unit scan: the unit files looked at per directory, and
// the bytes read of each.
const (
	maxFightUnitFiles = 4096
	maxUnitFileSize   = 64 << 10
)

// fightUnits lists the services of unitDirs (the first directory that has
// a unit wins, a mask hides it) whose Exec lines run one of tools, with
// the timer that starts each.
func fightUnits(d *diag, tools []string) []fightUnit {
	seen := map[string]bool{}
	var services []fightUnit
	timers := map[string]string{} // service -> timer
	for _, dir := range unitDirs {
		names, err := boundedDir(d.h, dir)
		if err != nil {
			continue
		}
		if len(names) > maxFightUnitFiles {
			names = names[:maxFightUnitFiles]
		}
		for _, n := range names {
			if seen[n] || (!strings.HasSuffix(n, ".service") && !strings.HasSuffix(n, ".timer")) {
				continue
			}
			seen[n] = true
			rel := path.Join(dir, n)
			if masked(d.h, rel) {
				continue
			}
			b, err := boundedRead(d.h, rel, maxUnitFileSize)
			if err != nil {
				continue
			}
			if strings.HasSuffix(n, ".timer") {
				unit := strings.TrimSuffix(n, ".timer") + ".service"
				for _, l := range strings.Split(string(b), "\n") {
					if v, ok := strings.CutPrefix(strings.TrimSpace(l), "Unit="); ok {
						unit = strings.TrimSpace(v)
					}
				}
				timers[unit] = n
				continue
			}
			if tool, cmd := runsTool(string(b), tools); tool != "" {
				services = append(services, fightUnit{service: n, tool: tool, command: cmd})
			}
		}
	}
	for i := range services {
		services[i].timer = timers[services[i].service]
	}
	slices.SortFunc(services, func(a, b fightUnit) int { return strings.Compare(a.service, b.service) })
	return services
}

// runsTool finds an Exec line of a service that runs one of tools (a word
// of the command whose base name is the tool: "/usr/bin/mlnx_qos -i eth2
// --pfc 0,0,0,1,0,0,0,0", "sh -c 'dcb pfc set ...'"); it returns the tool
// and the command.
func runsTool(unit string, tools []string) (tool, command string) {
	for _, l := range strings.Split(unit, "\n") {
		key, v, ok := strings.Cut(strings.TrimSpace(l), "=")
		if !ok || !strings.HasPrefix(key, "Exec") {
			continue
		}
		for _, w := range strings.Fields(v) {
			base := path.Base(strings.TrimLeft(strings.Trim(w, `'";`), "-@:+!"))
			if slices.Contains(tools, base) {
				return base, strings.TrimSpace(v)
			}
		}
	}
	return "", ""
}
