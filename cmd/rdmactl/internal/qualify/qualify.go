// Package qualify is `rdmactl qualify`: it tries, one at a time, each
// setting rdmad keeps that a RoCE port offers (RoCE mode and TOS, the
// OFED traffic class, PFC and its cable length, trust and the DSCP map,
// ETS, rate limits, buffers, global pause, the PFC storm timeout, OFED's
// ECN and CNP): it reads the value, writes a different legal one, reads it
// back, times the notification rdmad relies on and any carrier drop, puts
// the value back and checks it. It acts on the host itself (configfs,
// sysfs, DCB netlink, ethtool, rtnetlink and the RDMA resource tracker),
// not through rdmad, whose corrections it holds off over D-Bus (Holder);
// with a fixture root it does the same on the fixture, as rdmad --root
// serves it.
//
// Safety: a port that carries traffic (queue pairs beyond the kernel's
// own management ones) is refused unless Force; outside the initial PID
// namespace the resource dump is not whole, so qualify refuses to run; a
// value is put back after each setting, on an error and when the context
// ends (SIGINT, SIGTERM), and what could not be put back is said.
package qualify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/rdmares"
)

// DefaultWait is how long qualify waits, after each write, for its
// notification and for a carrier drop (a drop that comes later is not
// seen).
const DefaultWait = 2 * time.Second

// carrierWait bounds the wait for a carrier that went down to come back.
const carrierWait = 30 * time.Second

// Holder holds rdmad's corrections of settings of a port while qualify
// tries them (org.rdmad1.Manager.HoldCorrections).
type Holder interface {
	HoldCorrections(ctx context.Context, device string, port uint32, settings []string) error
	ReleaseCorrections(ctx context.Context, device string, port uint32) error
}

// Options is one qualification.
type Options struct {
	Kernel *Kernel
	// Targets name what to qualify: DEVICE (its Ethernet ports),
	// DEVICE/PORT, or a NETDEV; All every RDMA device's Ethernet ports.
	Targets []string
	All     bool
	// Force qualifies a port that carries traffic.
	Force bool
	// Wait is how long to wait for a notification and a carrier drop
	// after each write (0: DefaultWait).
	Wait time.Duration
	// Hold, when set, holds rdmad's corrections of each port's settings
	// while they are tried; nil when no rdmad runs.
	Hold Holder
	// Progress, when set, is told each result as it ends.
	Progress func(p Port, r Result)
}

// ArgError is a target that names nothing qualify can try: a usage error.
type ArgError struct{ Msg string }

func (e *ArgError) Error() string { return e.Msg }

// Refusal is why qualify did not start: not root, not in the initial PID
// namespace.
type Refusal struct{ Msg string }

func (e *Refusal) Error() string { return e.Msg }

// Report is a qualification: the host's kernel and each port's results.
type Report struct {
	Kernel string `json:"kernel"`
	// Fixture is the fixture's root when qualify ran on one.
	Fixture string `json:"fixture,omitempty"`
	Ports   []Port `json:"ports"`
}

// Port is one port's qualification.
type Port struct {
	Device        string `json:"device"`
	Port          int    `json:"port"`
	Netdev        string `json:"netdev"`
	Driver        string `json:"driver"`
	DriverVersion string `json:"driver_version"` // the module's version, or the kernel's for an in-tree driver
	Firmware      string `json:"firmware"`
	// PCIID is the adapter's PCI vendor and device, then its subsystem
	// (15b3:1017 15b3:0007); "" for a soft device.
	PCIID      string `json:"pci_id"`
	PCIAddress string `json:"pci_address,omitempty"`
	// Refused says why the port was not tried (queue pairs that carry
	// traffic, rdmad refusing the hold); QueuePairs are those queue
	// pairs.
	Refused    string       `json:"refused,omitempty"`
	QueuePairs []rdmares.QP `json:"queue_pairs,omitempty"`
	// Held says rdmad held off its corrections while qualify ran.
	Held    bool     `json:"held"`
	Results []Result `json:"results"`
}

// Subject is "mlx5_0/1 (ens1f0np0)".
func (p Port) Subject() string {
	s := fmt.Sprintf("%s/%d", p.Device, p.Port)
	if p.Netdev != "" {
		s += " (" + p.Netdev + ")"
	}
	return s
}

// The results of a setting.
const (
	Works             = "works"
	Refused           = "refused"            // the write failed: Errno says how
	Ignored           = "ignored"            // the write was taken, the value not held
	NoNotification    = "no notification"    // held, but nothing announced it: rdmad falls back to its read-back
	InterruptsTraffic = "interrupts traffic" // the link went down and up: LinkDownMS
	NotOffered        = "not offered"        // the port has no such setting: Detail says why
	Unreadable        = "unreadable"         // reading it failed: Detail says how
	NotTried          = "not tried"          // an earlier value could not be put back, or qualify was stopped
)

// Result is one setting's trial.
type Result struct {
	Setting string `json:"setting"` // rdmad's name, as in Port.Settings
	Title   string `json:"title"`
	Result  string `json:"result"`
	Errno   string `json:"errno,omitempty"`
	Detail  string `json:"detail,omitempty"`
	// Was is the value found, Tried the value written, ReadBack what the
	// kernel held after the write.
	Was      string `json:"was,omitempty"`
	Tried    string `json:"tried,omitempty"`
	ReadBack string `json:"read_back,omitempty"`
	// Notice is the notification a change of the setting comes with
	// ("inotify", "dcb", "ethtool", "none": none known); Notified says
	// whether it came within the wait, NotificationMS how long after the
	// write began.
	Notice         string  `json:"notice"`
	Notified       bool    `json:"notified"`
	NotificationMS float64 `json:"notification_ms,omitempty"`
	// LinkToggled says the netdev lost its carrier after the write;
	// LinkDownMS how long until it came back.
	LinkToggled bool    `json:"link_toggled"`
	LinkDownMS  float64 `json:"link_down_ms,omitempty"`
	WriteMS     float64 `json:"write_ms,omitempty"`
	// Restored says the value found was put back and read back;
	// RestoreError why not.
	Restored     bool   `json:"restored"`
	RestoreError string `json:"restore_error,omitempty"`
	// Disagrees lists where the result disagrees with rdmad's tables,
	// naming the row.
	Disagrees []string `json:"disagrees,omitempty"`
}

// Text is the result as the table shows it: "refused (EIO)",
// "interrupts traffic (1203 ms)".
func (r Result) Text() string {
	switch {
	case r.Result == Refused && r.Errno != "":
		return fmt.Sprintf("refused (%s)", r.Errno)
	case r.Result == InterruptsTraffic:
		return fmt.Sprintf("interrupts traffic (%s)", ms(r.LinkDownMS))
	}
	return r.Result
}

func ms(v float64) string {
	if v < 10 {
		return strconv.FormatFloat(v, 'f', 1, 64) + " ms"
	}
	return strconv.FormatFloat(v, 'f', 0, 64) + " ms"
}

// Unrestored lists the settings that were not put back, by port.
func (r *Report) Unrestored() []string {
	var out []string
	for _, p := range r.Ports {
		for _, res := range p.Results {
			if res.RestoreError != "" {
				out = append(out, fmt.Sprintf("%s %s (was %s): %s", p.Subject(), res.Setting, res.Was, res.RestoreError))
			}
		}
	}
	return out
}

// Run qualifies the ports opts names. The report holds what was done when
// ctx ends (every value tried is put back first) or a port fails; err is
// a usage error (*ArgError), a refusal to start (*Refusal), ctx's error,
// or what stopped it.
func Run(ctx context.Context, o Options) (*Report, error) {
	k := o.Kernel
	rep := &Report{Kernel: k.Release}
	if k.Fixture {
		rep.Fixture = k.Host.Root
	}
	if o.Wait <= 0 {
		o.Wait = DefaultWait
	}
	if k.InitialPIDNamespace != nil {
		initial, err := k.InitialPIDNamespace()
		if err != nil {
			return rep, err
		}
		if !initial {
			return rep, &Refusal{"qualify runs in the initial PID namespace only: from another one the kernel lists only that namespace's queue pairs, so a port in use could look idle (run it on the host, not in a container)"}
		}
		if os.Geteuid() != 0 {
			return rep, &Refusal{"qualify changes the host's settings (configfs, DCB, ethtool): run it as root"}
		}
	}
	targets, err := selectPorts(k.Host, o.Targets, o.All)
	if err != nil {
		return rep, err
	}
	for _, t := range targets {
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
		p := describePort(k, t)
		err := qualifyPort(ctx, o, t, &p)
		rep.Ports = append(rep.Ports, p)
		if err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// target is one port to qualify.
type target struct {
	dev    host.Device
	port   int
	netdev string
}

// Plan lists the ports opts names, as "mlx5_0/1 (ens1f0np0)", without
// touching anything: what rdmactl asks about before it starts.
func Plan(o Options) ([]string, error) {
	targets, err := selectPorts(o.Kernel.Host, o.Targets, o.All)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, t := range targets {
		out = append(out, Port{Device: t.dev.Name, Port: t.port, Netdev: t.netdev}.Subject())
	}
	return out, nil
}

// selectPorts finds the Ethernet ports the targets name.
func selectPorts(h *host.Host, names []string, all bool) ([]target, error) {
	if !all && len(names) == 0 {
		return nil, &ArgError{"name a device, a device's port (mlx5_0/1) or a netdev, or --all"}
	}
	if all && len(names) > 0 {
		return nil, &ArgError{"--all qualifies every RoCE port: name no device with it"}
	}
	devs, err := h.Devices()
	if err != nil {
		return nil, fmt.Errorf("read the RDMA devices: %w", err)
	}
	var out []target
	add := func(d host.Device, p *host.Port) {
		for _, t := range out {
			if t.dev.Name == d.Name && t.port == p.Number {
				return
			}
		}
		out = append(out, target{dev: d, port: p.Number, netdev: h.PortNetdev(&d, p)})
	}
	roce := func(d host.Device, p *host.Port) bool { return d.PortTransport(p) == host.TransportRoCE }
	if all {
		for _, d := range devs {
			for i := range d.Ports {
				if roce(d, &d.Ports[i]) {
					add(d, &d.Ports[i])
				}
			}
		}
		if len(out) == 0 {
			return nil, &ArgError{"--all: this host has no RoCE port"}
		}
		return out, nil
	}
	for _, name := range names {
		devName, portText, hasPort := strings.Cut(name, "/")
		found := false
		for _, d := range devs {
			for i := range d.Ports {
				p := &d.Ports[i]
				switch {
				case d.Name == devName && (!hasPort || portText == strconv.Itoa(p.Number)):
				case !hasPort && h.PortNetdev(&d, p) == name:
				default:
					continue
				}
				found = true
				if !roce(d, p) {
					if hasPort || len(d.Ports) == 1 {
						return nil, &ArgError{fmt.Sprintf("%s/%d is %s, not RoCE: rdmad keeps no setting there that qualify tries", d.Name, p.Number, d.PortTransport(p))}
					}
					continue
				}
				add(d, p)
			}
		}
		if !found {
			return nil, &ArgError{fmt.Sprintf("%q is no RDMA device, port or netdev of one here", name)}
		}
	}
	if len(out) == 0 {
		return nil, &ArgError{fmt.Sprintf("%s: no RoCE port", strings.Join(names, " "))}
	}
	return out, nil
}

// describePort reads what a report names of a port's adapter.
func describePort(k *Kernel, t target) Port {
	h := k.Host
	p := Port{Device: t.dev.Name, Port: t.port, Netdev: t.netdev, Driver: t.dev.Driver, Firmware: t.dev.FWVersion,
		PCIAddress: t.dev.PCIAddress, Results: []Result{}}
	if t.dev.PCIAddress != "" {
		dir := path.Join(host.ClassInfiniband, t.dev.Name, "device")
		id := func(a, b string) string {
			v, err1 := h.ReadString(path.Join(dir, a))
			d, err2 := h.ReadString(path.Join(dir, b))
			if err1 != nil || err2 != nil {
				return ""
			}
			return strings.TrimPrefix(v, "0x") + ":" + strings.TrimPrefix(d, "0x")
		}
		p.PCIID = strings.TrimSpace(id("vendor", "device") + " " + id("subsystem_vendor", "subsystem_device"))
	}
	if t.dev.Driver != "" {
		if v, err := h.ReadString(path.Join(host.SysModule, t.dev.Driver, "version")); err == nil {
			p.DriverVersion = v
		} else if k.Release != "" {
			p.DriverVersion = "in-tree (kernel " + k.Release + ")"
		}
	}
	return p
}

// qualifyPort tries each setting of one port, holding rdmad off first.
func qualifyPort(ctx context.Context, o Options, t target, p *Port) error {
	k := o.Kernel
	qps, err := k.QPs.QueuePairs(t.dev.Name)
	if err != nil {
		return fmt.Errorf("%s: %w", p.Subject(), err)
	}
	for _, q := range qps {
		if (q.Port == 0 || q.Port == t.port) && !q.Management(driverModule(t.dev)) {
			p.QueuePairs = append(p.QueuePairs, q)
		}
	}
	if len(p.QueuePairs) > 0 && !o.Force {
		var who []string
		for _, q := range p.QueuePairs {
			who = append(who, fmt.Sprintf("%s queue pair %d of %s", q.Type, q.LQPN, q.Owner()))
		}
		p.Refused = fmt.Sprintf("it carries traffic: %s; stop those users first, or --force", strings.Join(who, ", "))
		return nil
	}
	run := &portRun{k: k, o: o, t: t, p: p}
	trials := run.trials()
	if o.Hold != nil {
		var names []string
		for _, tr := range trials {
			names = append(names, tr.name())
		}
		if err := o.Hold.HoldCorrections(ctx, t.dev.Name, uint32(t.port), names); err != nil {
			p.Refused = "rdmad did not hold off its corrections, and would put each value back while qualify measures it: " + err.Error()
			return nil
		}
		p.Held = true
		defer func() {
			// Released even when ctx ended: the hold would last until
			// rdmactl leaves the bus otherwise, which it does soon anyway.
			rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = o.Hold.ReleaseCorrections(rctx, t.dev.Name, uint32(t.port))
		}()
	}
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	evs, err := k.Listen(lctx, t.netdev, dirsOf(k.Host, t.dev.Name, t.port, t.netdev))
	if err != nil {
		return fmt.Errorf("%s: %w", p.Subject(), err)
	}
	run.events = newEventLog(lctx, evs)
	defer run.undoAll()
	defer func() {
		for _, fn := range run.cleanup {
			_ = fn()
		}
	}()
	for i, tr := range trials {
		if ctx.Err() != nil || run.broken {
			for _, rest := range trials[i:] {
				p.Results = append(p.Results, Result{Setting: rest.name(), Title: rest.title(), Result: NotTried, Detail: run.whyNot(ctx)})
			}
			break
		}
		res := tr.run(ctx, run)
		p.Results = append(p.Results, res)
		if o.Progress != nil {
			o.Progress(*p, res)
		}
	}
	if err := run.undoAll(); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return nil
}

// driverModule is the kernel module of a device's RDMA driver (mlx5_ib
// for mlx5_core), whose own queue pairs are management ones.
func driverModule(d host.Device) string {
	if m, ok := strings.CutSuffix(d.Driver, "_core"); ok {
		return m + "_ib"
	}
	return d.Driver
}

// portRun is one port's qualification under way.
type portRun struct {
	k      *Kernel
	o      Options
	t      target
	p      *Port
	events *eventLog
	// undo puts back what was changed and not yet put back, newest
	// first; broken is set when a value could not be put back (the
	// remaining settings are not tried).
	undo   []func() error
	broken bool
	// cleanup undoes what qualify made to reach the settings (a
	// device's configfs directory), after the port.
	cleanup []func() error
}

func (r *portRun) whyNot(ctx context.Context) string {
	if r.broken {
		return "an earlier setting could not be put back"
	}
	if ctx.Err() != nil {
		return "qualify was stopped (" + ctx.Err().Error() + ")"
	}
	return ""
}

// undoAll runs what is still to be put back.
func (r *portRun) undoAll() error {
	var errs []error
	for len(r.undo) > 0 {
		fn := r.undo[len(r.undo)-1]
		r.undo = r.undo[:len(r.undo)-1]
		if err := fn(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		r.broken = true
		return fmt.Errorf("%s: could not put back: %w", r.p.Subject(), err)
	}
	return nil
}

// eventLog keeps the events of a port's listeners, with their times.
type eventLog struct {
	mu     chan struct{} // a one-slot lock
	events []Event
	wake   chan struct{}
}

func newEventLog(ctx context.Context, ch <-chan Event) *eventLog {
	l := &eventLog{mu: make(chan struct{}, 1), wake: make(chan struct{}, 1)}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-ch:
				if !ok {
					return
				}
				l.mu <- struct{}{}
				l.events = append(l.events, e)
				<-l.mu
				select {
				case l.wake <- struct{}{}:
				default:
				}
			}
		}
	}()
	return l
}

// since returns the events at or after t.
func (l *eventLog) since(t time.Time) []Event {
	l.mu <- struct{}{}
	defer func() { <-l.mu }()
	var out []Event
	for _, e := range l.events {
		if !e.At.Before(t) {
			out = append(out, e)
		}
	}
	return out
}

// waitFor waits until match finds an event since t, or until deadline, or
// ctx ends; it returns the event found.
func (l *eventLog) waitFor(ctx context.Context, t, deadline time.Time, match func(Event) bool) (Event, bool) {
	for {
		for _, e := range l.since(t) {
			if match(e) {
				return e, true
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			return Event{}, false
		}
		timer := time.NewTimer(left)
		select {
		case <-ctx.Done():
			timer.Stop()
			return Event{}, false
		case <-l.wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// removeDir removes a configfs directory qualify made.
func removeDir(p string) error { return unix.Rmdir(p) }
