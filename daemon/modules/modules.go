// Package modules loads the kernel modules listed in /etc/rdma/modules/*.conf
// when devices of the matching transport exist, as rdma-core's
// rdma-load-modules@.service does, but in one batched modprobe call.
package modules

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// Loader loads kernel modules. Modprobe is the real one.
type Loader interface {
	Load(ctx context.Context, names []string) error
}

// Modprobe runs `modprobe -a NAME...` found in PATH, so /etc/modprobe.d
// options and blacklists apply exactly as for any other module load.
type Modprobe struct {
	// Timeout bounds one call (default DefaultModprobeTimeout): a module
	// stuck waiting for firmware must not hold every later pass.
	Timeout time.Duration
}

// DefaultModprobeTimeout is rdma-core's TimeoutSec for rdma-load-modules@.
const DefaultModprobeTimeout = 90 * time.Second

// Load implements Loader.
func (m Modprobe) Load(ctx context.Context, names []string) error {
	if len(names) == 0 {
		return nil
	}
	bin, err := exec.LookPath("modprobe")
	if err != nil {
		return fmt.Errorf("find modprobe: %w", err)
	}
	timeout := m.Timeout
	if timeout <= 0 {
		timeout = DefaultModprobeTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// "--": a name can never be taken for an option (the lists are also
	// checked, see host.ValidModuleName).
	cmd := exec.CommandContext(ctx, bin, append([]string{"-a", "--"}, names...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second // a helper that keeps stderr open must not hold us either
	if err := cmd.Run(); err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return fmt.Errorf("modprobe -a %s: no answer after %s", strings.Join(names, " "), timeout)
		}
		msg := strings.TrimSpace(stderr.String())
		if msg != "" {
			return fmt.Errorf("modprobe -a %s: %w: %s", strings.Join(names, " "), err, msg)
		}
		return fmt.Errorf("modprobe -a %s: %w", strings.Join(names, " "), err)
	}
	return nil
}

// driverTransports mirrors rdma-core's rdma-description.rules: it decides by
// the parent device's driver, so an mlx5 NIC pulls both infiniband.conf and
// roce.conf whatever its ports are set to today.
var driverTransports = map[string][]host.Transport{
	host.DriverMLX4: {host.TransportInfiniBand, host.TransportRoCE},
	"mlx5_core":     {host.TransportInfiniBand, host.TransportRoCE},
	"qib":           {host.TransportInfiniBand},
	"hfi1":          {host.TransportOPA},
	"cxgb3":         {host.TransportIWARP},
	"cxgb4":         {host.TransportIWARP},
	"i40e":          {host.TransportIWARP},
	"nes":           {host.TransportIWARP},
	"be2net":        {host.TransportRoCE},
	"bnxt_en":       {host.TransportRoCE},
	"hns":           {host.TransportRoCE},
	"qede":          {host.TransportRoCE},
}

// ConfFiles returns the list names (without .conf) that apply to devs:
// "rdma" when any device exists, plus one per transport present.
func ConfFiles(devs []*host.Device) []string {
	if len(devs) == 0 {
		return nil
	}
	set := listDevices(devs)
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// listDevices maps each list name that applies to devs to the devices it
// applies to, in devs' order.
func listDevices(devs []*host.Device) map[string][]string {
	set := map[string][]string{}
	add := func(list, dev string) {
		if l := set[list]; len(l) == 0 || l[len(l)-1] != dev {
			set[list] = append(l, dev)
		}
	}
	for _, d := range devs {
		add("rdma", d.Name)
		for _, t := range driverTransports[d.Driver] {
			add(string(t), d.Name)
		}
		for i := range d.Ports {
			if t := d.PortTransport(&d.Ports[i]); t != host.TransportUnknown {
				add(string(t), d.Name)
			}
		}
	}
	return set
}

// Load is the kind of the module batch action.
const Load reconcile.Kind = "modules"

// Kinds implements reconcile.Part.
func (*Part) Kinds() []reconcile.Kind { return []reconcile.Kind{Load, ReadList} }

// Settings implements reconcile.Part: loading modules keeps no setting (a
// module is never unloaded, so nothing drifts back).
func (*Part) Settings() []*reconcile.Setting { return nil }

// Undo implements reconcile.Part. Nothing this part does is undone: rdmad
// never unloads a module (devices, their users and other modules hold it,
// and a listed module is wanted for every device of its transport), and
// reading a list changes nothing.
func (*Part) Undo(_ context.Context, a reconcile.Action) error {
	return fmt.Errorf("%s %s: rdmad never unloads modules: %w", a.Subject, a.Kind, reconcile.ErrNotUndoable)
}

// Part is the modules host part of the reconciler.
type Part struct {
	Host   *host.Host
	Loader Loader
	// Done, when set, makes loads run in the background: a pass never
	// waits for modprobe (modules of a 6.12 kernel are xz-compressed and
	// slow to load), so policy that does not need them applies at once
	// (RoCE needs only rdma_cm, which the RoCE part loads itself). Done is
	// called when a load ends, to ask for a pass that sees its result.
	// nil: loads run within the pass (rdmad --once, tests).
	Done func()
	// Log receives one record per background load: which modules, for
	// which devices, how long modprobe took (nil: slog.Default()).
	Log *slog.Logger

	loads   sync.WaitGroup
	mu      sync.Mutex
	running bool
	tried   string // the last batch loaded in the background, as a key
	lastErr error  // its result
}

// Apply loads, in one call, every listed module that is not present yet.
func (p *Part) ApplyHost(ctx context.Context, run *reconcile.HostRun) reconcile.Result {
	pol := run.Policy
	if !pol.Modules.Enable {
		return reconcile.Result{}
	}
	lists := ConfFiles(run.Devices)
	if len(lists) == 0 {
		return reconcile.Result{Modules: []string{}}
	}
	dir := pol.Modules.Directory
	if dir == "" {
		dir = config.DefaultModulesDirectory
	}
	fail := func(kind reconcile.Kind, err error) reconcile.Result {
		return reconcile.Result{Actions: []reconcile.Action{{Subject: reconcile.HostSubject(), Kind: kind, Status: reconcile.Failed, Err: err}}}
	}
	var wanted, sources, invalid []string
	seen := map[string]bool{}
	devsOf := listDevices(run.Devices)
	forDevs := map[string][]string{} // module -> devices its lists apply to
	listsOf := map[string][]string{} // module -> the lists naming it
	for _, l := range lists {
		rel := filepath.Join(dir, l+".conf")
		// A list anyone but root can change would let them load any module
		// with rdmad's privileges: the file read is the file judged
		// (openat from the judged directory, fstat of the descriptor).
		data, err := p.Host.ReadTrustedFile(rel)
		if errors.Is(err, fs.ErrNotExist) {
			continue // a transport without a list is normal
		}
		if err != nil {
			return fail(ReadList, fmt.Errorf("read a module list: %w", err))
		}
		sources = append(sources, rel)
		for _, l := range host.ParseModuleList(data) {
			if !l.Valid() {
				// As systemd-modules-load: the line is reported and
				// skipped, the list's other modules still load.
				invalid = append(invalid, fmt.Sprintf("/%s:%d: %q is not a module name (a comment only starts a line)", strings.TrimPrefix(rel, "/"), l.Line, sanitizeName(l.Name)))
				continue
			}
			if n := host.NormalizeModule(l.Name); !seen[n] {
				seen[n] = true
				wanted = append(wanted, l.Name)
			}
			forDevs[l.Name] = append(forDevs[l.Name], devsOf[strings.TrimSuffix(filepath.Base(rel), ".conf")]...)
			if ls := listsOf[l.Name]; len(ls) == 0 || ls[len(ls)-1] != rel {
				listsOf[l.Name] = append(ls, rel)
			}
		}
	}
	var bad []reconcile.Action
	if len(invalid) > 0 {
		bad = []reconcile.Action{{Subject: reconcile.HostSubject(), Kind: ReadList, Status: reconcile.Failed,
			Err: fmt.Errorf("skipped %s", strings.Join(invalid, "; "))}}
	}
	res := p.load(ctx, run, wanted, sources, loadOrigin{forDevs, listsOf})
	res.Actions = append(bad, res.Actions...)
	return res
}

// load loads the wanted modules that are missing, in one call.
func (p *Part) load(ctx context.Context, run *reconcile.HostRun, wanted, sources []string, origin loadOrigin) reconcile.Result {
	fail := func(kind reconcile.Kind, err error) reconcile.Result {
		return reconcile.Result{Actions: []reconcile.Action{{Subject: reconcile.HostSubject(), Kind: kind, Status: reconcile.Failed, Err: err}}}
	}
	if len(wanted) == 0 {
		return reconcile.Result{Modules: []string{}}
	}
	missing, err := p.Host.MissingModules(wanted)
	if err != nil {
		return fail(Load, err)
	}
	act := reconcile.Action{Subject: reconcile.HostSubject(), Kind: Load, To: strings.Join(wanted, " "), Source: strings.Join(sources, " ")}
	present := func() []string {
		out := []string{}
		for _, m := range wanted {
			if !slices.Contains(missing, m) {
				out = append(out, m)
			}
		}
		return out
	}
	if len(missing) == 0 {
		act.Status = reconcile.Unchanged
		return reconcile.Result{Actions: []reconcile.Action{act}, Modules: present()}
	}
	act.From = "missing: " + strings.Join(missing, " ")
	if run.ReadOnly() {
		act.Status, act.Err = reconcile.Held, errors.New("not loaded: rdmad only reads here")
		return reconcile.Result{Actions: []reconcile.Action{act}, Modules: present()}
	}
	if p.Done == nil {
		if err := p.Loader.Load(ctx, missing); err != nil {
			act.Status, act.Err = reconcile.Failed, err
			return reconcile.Result{Actions: []reconcile.Action{act}, Modules: present()}
		}
		act.Status = reconcile.Changed
		return reconcile.Result{Actions: []reconcile.Action{act}, Modules: wanted}
	}
	act.Status, act.Err = p.background(ctx, missing, run.Forced, union(missing, origin.devices), union(missing, origin.lists))
	return reconcile.Result{Actions: []reconcile.Action{act}, Modules: present()}
}

// ReadList is the kind of a failure to read a modules list.
const ReadList reconcile.Kind = "modules list"

// background starts loading missing unless a load runs already or this
// very batch was tried and did not make the modules appear: that is not
// retried on every pass, only on a forced one or when the batch changes.
func (p *Part) background(ctx context.Context, missing []string, forced bool, devices, lists []string) (reconcile.Status, error) {
	key := strings.Join(missing, " ")
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running {
		return reconcile.Pending, nil
	}
	if p.tried == key && !forced {
		if p.lastErr != nil {
			return reconcile.Failed, p.lastErr
		}
		return reconcile.Failed, fmt.Errorf("modprobe -a %s succeeded but they are still not loaded", key)
	}
	p.running, p.tried = true, key
	p.loads.Add(1)
	log := p.Log
	if log == nil {
		log = slog.Default()
	}
	go func() {
		defer p.loads.Done()
		start := time.Now()
		err := p.Loader.Load(ctx, missing)
		took := time.Since(start)
		attrs := []any{"modules", strings.Join(missing, " "), "for", devicesAttr(devices), "lists", strings.Join(lists, " "),
			"took", took.Round(time.Millisecond).String(), "took_ms", took.Milliseconds()}
		if err != nil {
			log.Warn("modules: modprobe failed", append(attrs, "err", err)...)
		} else {
			log.Info("modules: loaded", attrs...)
		}
		p.mu.Lock()
		p.running, p.lastErr = false, err
		p.mu.Unlock()
		p.Done()
	}()
	return reconcile.Pending, nil
}

// loadOrigin says, per module, which devices' transports and which lists
// asked for it: the log record of a load names them.
type loadOrigin struct {
	devices, lists map[string][]string
}

// union lists, once each and sorted, what of[m] names for every m in
// missing.
func union(missing []string, of map[string][]string) []string {
	set := map[string]bool{}
	for _, m := range missing {
		for _, d := range of[m] {
			set[d] = true
		}
	}
	out := make([]string, 0, len(set))
	for d := range set {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// maxLoggedDevices bounds the device names in one log record: a thousand
// VFs arriving at boot are one load, not a thousand-name line.
const maxLoggedDevices = 8

// devicesAttr is the "for" of a load's log record: the device names, the
// first few and a count beyond them, each made valid UTF-8 (the handler
// quotes the value).
func devicesAttr(devs []string) string {
	var b strings.Builder
	for i, d := range devs {
		if i == maxLoggedDevices {
			fmt.Fprintf(&b, " and %d more", len(devs)-i)
			break
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(sanitizeName(d))
	}
	return b.String()
}

// Wait blocks until no background load runs (tests, shutdown).
func (p *Part) Wait() { p.loads.Wait() }

// sanitizeName keeps an invalid name printable in an error message.
func sanitizeName(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return strings.ToValidUTF8(s, "\ufffd")
}
