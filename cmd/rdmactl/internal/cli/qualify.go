package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/spf13/cobra"

	"github.com/rdmad/rdmad/cmd/rdmactl/internal/qualify"
	"github.com/rdmad/rdmad/daemon/version"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
)

func init() { register("", qualifyCommand) }

func qualifyCommand(e *env) *cobra.Command {
	var root string
	var yes, force, all bool
	var wait time.Duration
	c := &cobra.Command{
		Use:   "qualify [--root DIR] [--yes] [--force] [--all] [--wait DUR] [DEVICE[/PORT]|NETDEV...]",
		Short: "Try each setting rdmad keeps on a RoCE port, and put it back",
		Long: `Try, one at a time, each setting rdmad keeps that a RoCE port offers (RoCE
mode and TOS, the OFED traffic class, PFC and its cable length, trust and the
DSCP map, ETS, rate limits, buffers, global pause, the PFC storm timeout,
OFED's ECN and CNP): read the value, write a different legal one, read it
back, time the notification rdmad relies on (inotify, DCB netlink, ethtool)
and any loss of carrier, then put the value back and read it again. Each
setting: works, refused (errno), ignored (taken, not held), no notification
(rdmad falls back to its read-back), interrupts traffic (how long the link
was down), or not offered. rdmad, when it runs, holds off its corrections of
the port while it is tried (org.rdmad1.Manager.HoldCorrections), and the
results are compared with rdmad's tables of notifications and of changes
that interrupt traffic. Root only, on the host itself (not over -H), in the
initial PID namespace. A port that carries RDMA traffic (queue pairs other
than the kernel's own management ones) is refused unless --force. On a
terminal it asks before it starts (--yes for scripts). SIGINT and SIGTERM
put back the setting under way before rdmactl exits; what could not be put
back is said. With --root DIR it runs on a fixture host (its files, its
fixture/kernel.json and fixture/qp.json). Exits 0 when every port was tried
and every value put back, 1 otherwise, 2 for a bad argument.`,
		Args:              func(*cobra.Command, []string) error { return nil },
		ValidArgsFunction: e.completeDevices(true),
		RunE: func(cmd *cobra.Command, args []string) error {
			if e.host != "" {
				return usagef(cmd, "qualify changes this host's own settings, not over -H: run it there (ssh HOST rdmactl qualify)")
			}
			if wait <= 0 {
				return usagef(cmd, "--wait %s: want a duration above 0, such as 2s", wait)
			}
			k := qualify.HostKernel()
			if root != "" && root != "/" {
				k = qualify.FixtureKernel(root)
			}
			o := qualify.Options{Kernel: k, Targets: args, All: all, Force: force, Wait: wait}
			return e.qualify(cmd, o, yes)
		},
	}
	f := c.Flags()
	f.StringVar(&root, "root", "", "qualify the fixture host at `DIR` (a tree laid out as /) instead of this host")
	f.BoolVar(&yes, "yes", false, "do not ask before starting")
	f.BoolVar(&force, "force", false, "qualify a port even when it carries RDMA traffic")
	f.BoolVar(&all, "all", false, "qualify every RoCE port")
	f.DurationVar(&wait, "wait", qualify.DefaultWait, "wait `DUR` after each write for its notification and a loss of carrier")
	_ = c.MarkFlagDirname("root")
	return c
}

// qualifyReport is qualify's JSON document.
type qualifyReport struct {
	Rdmactl string `json:"rdmactl"`
	*qualify.Report
	// Rdmad says whether rdmad held off its corrections ("holding off")
	// or why not.
	Rdmad string   `json:"rdmad"`
	Wait  string   `json:"wait"`
	Notes []string `json:"notes"`
	// Unrestored lists what could not be put back.
	Unrestored []string `json:"unrestored"`
}

func (e *env) qualify(cmd *cobra.Command, o qualify.Options, yes bool) error {
	ports, err := qualify.Plan(o)
	var ae *qualify.ArgError
	if errors.As(err, &ae) {
		return usagef(cmd, "%s", ae.Msg)
	}
	if err != nil {
		return err
	}
	if !yes && e.terminal {
		fmt.Fprintf(e.stderr, "rdmactl: qualify writes each setting of %s to another value and back, one at a time; PFC may take a port's link down and up. Go on? [y/N] ",
			escapeText(strings.Join(ports, ", ")))
		line, _ := bufio.NewReader(e.stdin).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
			return failf("qualify: not confirmed; nothing was changed (--yes answers yes)")
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	doc := qualifyReport{Rdmactl: version.Version, Wait: o.Wait.String(), Notes: []string{}, Unrestored: []string{}}
	tables := qualify.Tables{NotificationsMissing: "rdmad does not run", DisruptionsMissing: "rdmad does not run"}
	c, err := e.client()
	switch {
	case err != nil:
		doc.Rdmad = "not reached: " + describeError(err)
		doc.Notes = append(doc.Notes, "rdmad was not reached, so nothing held off its corrections: "+describeError(err))
	default:
		defer c.Close()
		o.Hold = c
		doc.Rdmad = "holding off"
		tables = managerTables(ctx, c, e.readTimeout)
	}
	text := e.jsonMode() == ""
	if text {
		e.qualifyProgress(&o)
	}
	rep, err := qualify.Run(ctx, o)
	doc.Report = rep
	var ref *qualify.Refusal
	switch {
	case errors.As(err, &ae):
		return usagef(cmd, "%s", ae.Msg)
	case errors.As(err, &ref):
		return failf("qualify: %s", ref.Msg)
	}
	doc.Notes = append(doc.Notes, qualify.Compare(rep, tables, o.Wait)...)
	doc.Unrestored = append(doc.Unrestored, rep.Unrestored()...)
	held := false
	for _, p := range rep.Ports {
		held = held || p.Held
	}
	if o.Hold != nil && !held {
		doc.Rdmad = "reached, no hold taken"
	}
	interrupted := errors.Is(err, context.Canceled)
	if err != nil && !interrupted {
		doc.Notes = append(doc.Notes, "stopped: "+err.Error())
	}
	if text {
		e.qualifyEnd(doc, interrupted)
	} else {
		b, jerr := json.Marshal(doc)
		if jerr != nil {
			return jerr
		}
		if jerr := e.printDoc("", b); jerr != nil {
			return jerr
		}
	}
	failed := err != nil || len(doc.Unrestored) > 0
	for _, p := range rep.Ports {
		failed = failed || p.Refused != ""
	}
	switch {
	case !failed:
		return nil
	case !text:
		return silentFailure{}
	case len(doc.Unrestored) > 0:
		return failf("qualify: %d settings could not be put back (listed above): set them by hand", len(doc.Unrestored))
	case interrupted:
		return failf("qualify: stopped by a signal; every value tried was put back")
	case err != nil:
		return failf("qualify: %s", describeError(err))
	}
	return failf("qualify: a port was not tried (said above)")
}

// managerTables reads rdmad's tables from the Manager's properties.
func managerTables(ctx context.Context, c *client.Client, d time.Duration) qualify.Tables {
	t := qualify.Tables{}
	cx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var props map[string]dbus.Variant
	err := c.Conn().Object(dbusapi.BusName, dbusapi.RootPath).CallWithContext(cx, "org.freedesktop.DBus.Properties.GetAll", 0, dbusapi.ManagerIface).Store(&props)
	var m dbusapi.Manager
	if err == nil {
		err = dbusapi.FromProps(props, &m)
	}
	if err != nil {
		why := "reading rdmad's Manager properties: " + describeError(err)
		return qualify.Tables{NotificationsMissing: why, DisruptionsMissing: why}
	}
	if _, ok := props["Notifications"]; ok {
		t.Notifications = []qualify.NoticeRow{}
		for _, n := range m.Notifications {
			t.Notifications = append(t.Notifications, qualify.NoticeRow{Driver: n.Driver, Setting: n.Setting, Notice: n.Notice})
		}
	} else {
		t.NotificationsMissing = "this rdmad publishes no Notifications table"
	}
	t.Disruptions, t.DisruptionsMissing = disruptionRows(props)
	return t
}

// disruptionRows reads the Manager's Disruptions property, rdmad's table
// of what a change of a setting does to traffic per driver, as (driver,
// setting, key, effect, when, follows); why not when it has none.
func disruptionRows(props map[string]dbus.Variant) ([]qualify.DisruptionRow, string) {
	v, ok := props["Disruptions"]
	if !ok {
		return nil, "this rdmad publishes no Disruptions table"
	}
	var rows []struct{ Driver, Setting, Key, Effect, When, Follows string }
	if err := dbus.Store([]any{v.Value()}, &rows); err != nil {
		return nil, "rdmad's Disruptions table does not read: " + err.Error()
	}
	out := []qualify.DisruptionRow{}
	for _, r := range rows {
		out = append(out, qualify.DisruptionRow{Driver: r.Driver, Setting: r.Setting, Effect: r.Effect, When: r.When})
	}
	return out, ""
}

// qualifyProgress prints each setting as it ends (the port's header
// before its first).
func (e *env) qualifyProgress(o *qualify.Options) {
	const row = "%-22s %-28s %-18s %-16s %s\n"
	last := ""
	o.Progress = func(p qualify.Port, r qualify.Result) {
		if p.Subject() != last {
			last = p.Subject()
			fmt.Fprintf(e.stdout, "%s\n", escapeText(portLine(p)))
			if !e.noLegend {
				fmt.Fprintf(e.stdout, row, "SETTING", "RESULT", "NOTIFICATION", "LINK", "RESTORED")
			}
		}
		fmt.Fprintf(e.stdout, row, r.Setting, r.Text(), noticeText(r), linkText(r), restoredText(r))
		if r.Detail != "" && r.Result != qualify.Works {
			fmt.Fprintf(e.stdout, "%22s %s\n", "", escapeText(r.Detail))
		}
	}
}

func portLine(p qualify.Port) string {
	s := p.Subject() + ": driver " + dash(p.Driver)
	if p.DriverVersion != "" {
		s += " " + p.DriverVersion
	}
	s += ", firmware " + dash(p.Firmware)
	if p.PCIID != "" {
		s += ", PCI " + p.PCIID
	}
	return s
}

func noticeText(r qualify.Result) string {
	switch {
	case r.Result == qualify.NotOffered || r.Result == qualify.NotTried:
		return "-"
	case r.Notified:
		return fmt.Sprintf("%s %.1f ms", r.Notice, r.NotificationMS)
	case r.Notice == "none":
		return "none known"
	}
	return r.Notice + ": none"
}

func linkText(r qualify.Result) string {
	switch {
	case r.Result == qualify.NotOffered || r.Result == qualify.NotTried:
		return "-"
	case r.LinkToggled:
		return fmt.Sprintf("down %.0f ms", r.LinkDownMS)
	}
	return "stayed up"
}

func restoredText(r qualify.Result) string {
	switch {
	case r.RestoreError != "":
		return "NO"
	case r.Result == qualify.NotOffered || r.Result == qualify.NotTried:
		return "-"
	}
	return "yes"
}

// qualifyEnd prints what the progress lines did not: refused ports, the
// disagreements with rdmad's tables, notes and what was not put back.
func (e *env) qualifyEnd(doc qualifyReport, interrupted bool) {
	w := e.stdout
	for _, p := range doc.Ports {
		if p.Refused != "" {
			fmt.Fprintf(w, "%s: not tried: %s\n", escapeText(p.Subject()), escapeText(p.Refused))
		}
		for _, r := range p.Results {
			for _, d := range r.Disagrees {
				fmt.Fprintf(w, "%s %s disagrees with rdmad: %s\n", escapeText(p.Subject()), r.Setting, escapeText(d))
			}
		}
	}
	fmt.Fprintf(w, "kernel %s; rdmad: %s\n", dash(escapeText(doc.Kernel)), escapeText(doc.Rdmad))
	for _, n := range doc.Notes {
		fmt.Fprintf(w, "note: %s\n", escapeText(n))
	}
	for _, u := range doc.Unrestored {
		fmt.Fprintf(w, "NOT PUT BACK: %s\n", escapeText(u))
	}
	if interrupted && len(doc.Unrestored) == 0 {
		fmt.Fprintln(w, "stopped by a signal: every value tried was put back")
	}
}
