package cli

import (
	"bufio"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
)

// A call that would interrupt traffic (a new PFC mask on mlx5 toggles the
// port's link) is announced from rdmad's own table (the Manager's
// Disruptions property, or the marks of a plan): on a terminal rdmactl
// asks before the call (--yes answers for scripts), and it notes what
// happened only after rdmad accepted the call, so a refused call prints
// no note.

// interruption is one change of a call that interrupts traffic.
type interruption struct {
	subject string // "mlx5_0/1 (ens1f0np0)"
	change  string // "PFC 3 to 3,4"
	effect  string // dbusapi.DisruptsLink...
	driver  string
	when    string // the driver's condition, in words
}

// effectWords says what an effect does, for people: the driver's action
// and what it costs.
func effectWords(effect string) (does, costs string) {
	switch effect {
	case dbusapi.DisruptsLink:
		return "takes the port's link down and up", "about a second without traffic"
	case dbusapi.DisruptsQueues:
		return "may reopen the netdev's queues", "a moment without traffic"
	case dbusapi.DisruptsDevice:
		return "registers the device again", "every port of it stops"
	}
	return effect, "traffic stops"
}

// String is "mlx5_0/1 (ens1f0): PFC 3 to 3,4: mlx5_core takes the port's
// link down and up when the PFC priorities change (about a second without
// traffic)".
func (i interruption) String() string {
	driver := i.driver
	if driver == "" {
		driver = "the driver"
	}
	does, costs := effectWords(i.effect)
	s := fmt.Sprintf("%s: %s: %s %s", i.subject, i.change, driver, does)
	if i.when != "" {
		s += " " + i.when
	}
	return escapeText(s + " (" + costs + ")")
}

// confirm asks, on a terminal and without --yes, whether to make a call
// with these interruptions; a no (or end of input) refuses the call,
// naming what, before anything is changed.
func (e *env) confirm(what string, ints []interruption, yes bool) error {
	if len(ints) == 0 || yes || !e.terminal {
		return nil
	}
	for _, i := range ints {
		fmt.Fprintf(e.stderr, "rdmactl: %s\n", i)
	}
	fmt.Fprintf(e.stderr, "%s interrupts traffic on %s. Go on? [y/N] ", what, plural(countSubjects(ints), "port", "ports"))
	line, _ := bufio.NewReader(e.stdin).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return failf("%s: not confirmed; nothing was changed (--yes answers yes)", what)
}

// noteInterruptions says, after rdmad accepted the call, what it
// interrupted.
func (e *env) noteInterruptions(ints []interruption) {
	for _, i := range ints {
		fmt.Fprintf(e.stderr, "rdmactl: note: %s\n", i)
	}
}

func countSubjects(ints []interruption) int {
	var seen []string
	for _, i := range ints {
		if !slices.Contains(seen, i.subject) {
			seen = append(seen, i.subject)
		}
	}
	return len(seen)
}

// ethernetPorts calls fn for each Ethernet (RoCE) port of dev rdmad
// publishes (port, or every one when port is 0), with the rows of rdmad's
// table for the device's driver and the port's subject as notes name it
// ("mlx5_0/1 (ens1f0np0)"). When rdmad's state cannot be read it calls
// nothing: the call will say why.
func (e *env) ethernetPorts(dev string, port int, fn func(p dbusapi.Port, subject string, row func(key string) (dbusapi.Disruption, bool))) {
	s, err := e.snapshot()
	if err != nil {
		return
	}
	d := s.Device(dev)
	if d == nil {
		return
	}
	row := func(key string) (dbusapi.Disruption, bool) {
		return disruptionFor(s.Manager.Disruptions, d.Driver, key)
	}
	for _, p := range d.Ports {
		if (port == 0 || int(p.Number) == port) && p.Transport == "roce" {
			fn(p, fmt.Sprintf("%s/%d (%s)", dev, p.Number, dash(strings.Join(p.Netdevs, ","))), row)
		}
	}
}

// disruptionFor is the row of rdmad's table for a change of the setting
// declared by key on driver, when it interrupts traffic.
func disruptionFor(table []dbusapi.Disruption, driver, key string) (dbusapi.Disruption, bool) {
	for _, d := range table {
		if d.Driver == driver && d.Key == key && d.Interrupts() {
			return d, true
		}
	}
	return dbusapi.Disruption{}, false
}

// planInterruptions is what the files, as they are, would interrupt when
// applied (a reload, a reconcile), asked of rdmad's Plan; nothing when
// there is no one to ask (not a terminal, --yes) or rdmad cannot plan.
func (e *env) planInterruptions(yes bool) []interruption {
	if yes || !e.terminal {
		return nil
	}
	var doc string
	if err := e.read(func(c *client.Client, cx context.Context) (err error) {
		doc, err = c.Plan(cx, nil, "")
		return err
	}); err != nil {
		return nil
	}
	p, err := dbusapi.DecodePlan(doc)
	if err != nil {
		return nil
	}
	var out []interruption
	for _, s := range p.Settings {
		if !s.Disrupts || (s.Change != dbusapi.PlanSet && s.Change != dbusapi.PlanRelease) {
			continue
		}
		out = append(out, interruption{subject: s.Subject.String(), change: fmt.Sprintf("%s %s to %s", s.Name, dash(s.Now), dash(s.Planned)),
			effect: s.Disruption, when: s.DisruptionWhen})
	}
	return out
}
