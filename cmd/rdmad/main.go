// Command rdmad applies the host's declared RDMA policy whenever RDMA
// devices appear and publishes devices, ports and policy on D-Bus.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/coreos/go-systemd/v22/journal"

	"github.com/rdmad/rdmad/daemon/audit"
	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/events"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/daemon/version"
	"github.com/rdmad/rdmad/dbusapi"
)

func main() {
	os.Exit(run())
}

func run() int {
	fs := flag.NewFlagSet("rdmad", flag.ContinueOnError)
	configFile := fs.String("config", "", "main configuration `file` (default ROOT/etc/rdma/rdmad.toml; drop-ins are read from rdmad.d/ beside it)")
	root := fs.String("root", "/", "host root `directory`: every sys, etc, proc and run path is read under it")
	bus := fs.String("bus", "system", "D-Bus to serve on: system, session, none, or a bus `address`")
	once := fs.Bool("once", false, "reconcile everything once, print what was done, and exit (1 if any action failed)")
	checkConfig := fs.Bool("check-config", false, "load the configuration, print every error with file and line, and exit 0 (it loads) or 1; touches nothing")
	with := fs.String("with", "", "with --check-config: check the files as if `FILE` were a drop-in in rdmad.d/ too")
	as := fs.String("as", "", "with --with: the drop-in's `NAME` in rdmad.d/ (default: FILE's base name)")
	verbose := fs.Bool("verbose", false, "log debug messages")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "rdmad: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *showVersion {
		fmt.Println("rdmad", version.Version)
		return 0
	}
	if *checkConfig {
		return checkConfigFiles(os.Stdout, os.Stderr, *root, *configFile, *with, *as)
	}
	if *with != "" || *as != "" {
		fmt.Fprintln(os.Stderr, "rdmad: --with and --as go with --check-config")
		return 2
	}
	// A log or report written to a closed pipe (journald restarted, a
	// reader gone) must not kill rdmad: the write fails and is dropped.
	signal.Ignore(syscall.SIGPIPE)
	log := newLogger(os.Stderr, *verbose, *once, host.New(*root).Path(journalSocket))
	slog.SetDefault(log)

	// Signals are caught before anything else: SIGHUP's default action
	// kills the process, so a reload asked for while rdmad starts (before
	// the bus is up, during the first pass) would otherwise stop it. A
	// SIGHUP that arrives before the daemon loop runs is kept and served
	// once it does; the handler stays until exit, so one during shutdown
	// is ignored. SIGTERM and SIGINT stop rdmad cleanly at any point.
	var hup chan os.Signal
	if !*once {
		hup = make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	h := host.New(*root)
	svc, err := service.New(service.Options{Host: h, ConfigFile: *configFile, Parts: compose.Parts(compose.KernelFor(h)), Log: log, OneShot: *once})
	if err != nil {
		fmt.Fprintf(os.Stderr, "rdmad: %v\n", err)
		return 1
	}
	// One rdmad per host: a second one started by mistake stops here,
	// before it changes anything (loading the configuration only reads).
	lock, err := h.LockInstance()
	if err != nil {
		hint := ""
		if errors.Is(err, host.ErrLocked) {
			hint = "; talk to it with rdmactl (rdmactl reconcile, rdmactl reload) or stop it first"
		}
		fmt.Fprintf(os.Stderr, "rdmad: %v%s\n", err, hint)
		notifyStatus("not started: " + err.Error())
		return 1
	}
	defer lock.Release()
	svc.RemoveStaleTemps()
	if !*once {
		svc.SaveLastGood()
	}
	if ctx.Err() != nil {
		return 0 // stopped while starting
	}

	if *once {
		rep := svc.ReconcileNow(ctx)
		out := bufio.NewWriterSize(os.Stdout, 64<<10) // one line per action: thousands on a large host
		reconcile.WriteReport(out, rep)
		if err := out.Flush(); err != nil {
			fmt.Fprintf(os.Stderr, "rdmad: %v\n", err)
			return 1
		}
		if rep.Failed() {
			return 1
		}
		return 0
	}
	if err := serve(ctx, svc, *bus, hup, log); err != nil {
		log.Error("rdmad stopped", "err", err)
		notifyStatus("failed: " + err.Error())
		return 1
	}
	return 0
}

// serve runs the daemon until ctx ends: objects exported and events
// subscribed first (nothing that happens during the first pass is missed),
// then the first full pass, then the bus name and READY=1 together.
func serve(ctx context.Context, svc *service.Service, bus string, hup <-chan os.Signal, log *slog.Logger) error {
	// The [metrics] textfile follows the service from its first pass.
	textfile := compose.Textfile(svc, log)
	link, err := startBus(ctx, svc, bus, log)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while connecting to the bus
		}
		return err
	}
	defer link.Stop()
	if link != nil {
		compose.CountRefused(link.srv, textfile)
	}
	// On the way out, changes are refused from now on and the one under
	// way (a persisted write) finishes first, bounded (runs before stopBus).
	defer svc.Shutdown(service.DefaultShutdownGrace)

	go func() {
		for {
			select {
			case <-ctx.Done():
				// From the signal on, a new change is refused: the
				// deferred calls below run only after the pass under
				// way has ended, which may take seconds.
				svc.Shutdown(service.DefaultShutdownGrace)
				return
			case <-hup:
				// systemctl reload: logged with its caller, as a call is.
				_ = svc.ReloadFor(audit.Signal("SIGHUP")) // errors are logged and published by Reload
			}
		}
	}()

	startWatchdog(ctx, svc, log)

	rec := svc.Reconciler()
	status := func() { notifyStatus(statusText(svc, link.Lost())) }
	if link != nil {
		// A lost bus and its return show in STATUS= and in the
		// textfile's rdmad_dbus_connected.
		link.changed = func() {
			status()
			textfile.BusConnected(!link.Lost())
		}
	}
	rec.OnChange(func(reconcile.Change) { status() })
	svc.OnConfigChange(status)
	status()

	errc := make(chan error, 1)
	ran := make(chan struct{})
	configReady := make(chan struct{})
	// Kernel and configuration events feed the service until ctx ends.
	sources := compose.Events(svc, log, configReady)
	go func() { errc <- events.RunAll(ctx, log, sources) }()
	go func() { _ = svc.Run(ctx); close(ran) }()
	go textfile.Run(ctx)
	// On the way out, the pass under way ends before the bus goes: it
	// writes nothing half (attributes are single writes, files are
	// renamed into place), but its result is published and logged.
	defer waitShutdown(ran, log)

	// An edit saved between the first load and the watch would be missed:
	// once the files are watched, load them again (no pass if unchanged).
	// A watcher that cannot start is retried in the background; the first
	// pass does not wait for it longer than this.
	select {
	case <-configReady:
		_ = svc.Reload() // errors are logged and published by Reload
	case <-time.After(5 * time.Second):
		log.Warn("configuration files are not watched yet; edits are seen once they are")
	case <-ctx.Done():
		return nil
	}
	svc.Start()
	if err := svc.Settle(ctx); err != nil {
		daemon.SdNotify(false, daemon.SdNotifyStopping)
		return nil // stopped before the first pass finished
	}
	// The first pass read every device, and the directories its records
	// name are watched (Settle); what that allocated on the way is
	// garbage now. Hand it back rather than idle at its high-water mark.
	debug.FreeOSMemory()
	if err := link.Publish(ctx); err != nil {
		return err
	}
	if link != nil {
		textfile.BusConnected(!link.Lost())
	}
	daemon.SdNotify(false, daemon.SdNotifyReady)
	log.Info("rdmad ready", "version", version.Version, "devices", len(rec.Summary().Devices))

	select {
	case <-ctx.Done():
	case err := <-errc:
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		<-ctx.Done()
	}
	daemon.SdNotify(false, daemon.SdNotifyStopping)
	return nil
}

// startWatchdog pings systemd's watchdog (WatchdogSec= in the unit) every
// quarter interval while no pass is stuck, and after every pass.
func startWatchdog(ctx context.Context, svc *service.Service, log *slog.Logger) {
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil || interval <= 0 {
		return
	}
	passDone := make(chan struct{}, 1)
	svc.OnPassDone(func() {
		select {
		case passDone <- struct{}{}:
		default:
		}
	})
	w := &watchdog{interval: interval, passes: svc, now: time.Now, log: log,
		notify: func() { _, _ = daemon.SdNotify(false, daemon.SdNotifyWatchdog) }}
	t := time.NewTicker(interval / 4)
	go func() {
		defer t.Stop()
		w.run(ctx, t.C, passDone)
	}()
	log.Debug("systemd watchdog enabled", "interval", interval)
}

// statusText is what systemctl status shows: a lost bus and the
// configuration error first, with which policy is in force instead
// (STATUS= is cut), then devices and the last reconcile, then a last good
// configuration that cannot be saved.
func statusText(svc *service.Service, busLost bool) string {
	sum := svc.Reconciler().Summary()
	text := fmt.Sprintf("%d RDMA devices; last reconcile: %s", len(sum.Devices), reconcile.Summarize(sum.Failures))
	in := svc.InForce()
	if err := svc.ConfigError(); err != nil {
		text = "config error (in force: " + in.Describe() + "): " + err.Error() + "; " + text
	}
	if in.SaveError != nil {
		text += "; the last good configuration cannot be saved (rdmactl doctor)"
	}
	if busLost {
		text = "D-Bus connection lost, reconnecting (policy still applied; rdmactl cannot reach rdmad meanwhile); " + text
	}
	return text
}

// notifyStatus tells systemd what rdmad is doing (systemctl status shows
// it). The text quotes the host (device names, kernel errors), and
// sd_notify is one KEY=value per line: a newline in it would end STATUS=
// and start another assignment (READY=1, MAINPID=...). So it is escaped as
// everything rdmad publishes (systemd also ignores a STATUS= that is not
// UTF-8) and cut, keeping the datagram far below systemd's 4 KiB.
func notifyStatus(text string) {
	daemon.SdNotify(false, statusAssignment(text))
}

// maxStatusText is how much of a status text STATUS= carries; the journal
// has the rest.
const maxStatusText = 512

func statusAssignment(text string) string {
	cut := ""
	if len(text) > maxStatusText {
		// Not inside a character (a byte that is not UTF-8 is escaped
		// whole wherever the cut falls).
		n := maxStatusText
		for back := 0; back < utf8.UTFMax-1 && !utf8.RuneStart(text[n]); back++ {
			n--
		}
		text, cut = text[:n], "..."
	}
	return "STATUS=" + dbusapi.Escape(text) + cut
}

// shutdownGrace bounds how long rdmad waits at exit for the pass under way
// (a modprobe it waits for is killed with the context already).
const shutdownGrace = 10 * time.Second

func waitShutdown(ran <-chan struct{}, log *slog.Logger) {
	t := time.NewTimer(shutdownGrace)
	defer t.Stop()
	select {
	case <-ran:
	case <-t.C:
		log.Warn("the pass under way did not end in time; exiting anyway", "waited", shutdownGrace)
	}
}

// newLogger logs to w (stderr). Under systemd (JOURNAL_STREAM names
// stderr) every line starts with its sd-daemon priority prefix (<3> error,
// <4> warning, <5> notice, <6> info, <7> debug), which journald turns into
// the entry's priority, so `journalctl -p err` shows rdmad's errors; the
// journal adds timestamps, so they are left out there; and the lines that
// name a caller go to journald's native socket (journalSock, under the host
// root) with fields of their own. Elsewhere lines are slog's text, the
// caller's keys as key=value. With --once the printed report is the
// output, so per-action logs are shown only with --verbose.
func newLogger(w io.Writer, verbose, once bool, journalSock string) *slog.Logger {
	level := slog.LevelInfo
	switch {
	case verbose:
		level = slog.LevelDebug
	case once:
		level = slog.LevelError + 4
	}
	journalStream, _ := journal.StderrIsJournalStream()
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && a.Key == slog.TimeKey && journalStream {
			return slog.Attr{}
		}
		return audit.NameLevel(groups, a)
	}}
	if journalStream {
		return slog.New(newPriorityHandler(w, opts, journalSock))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
