// Package modules loads the kernel modules listed in /etc/rdma/modules/*.conf
// when devices of the matching transport exist, as rdma-core's
// rdma-load-modules@.service does, but in one batched modprobe call.
package modules

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
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
		return fmt.Errorf("modules: %w", err)
	}
	timeout := m.Timeout
	if timeout <= 0 {
		timeout = DefaultModprobeTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"-a"}, names...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second // a helper that keeps stderr open must not hold us either
	if err := cmd.Run(); err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return fmt.Errorf("modules: modprobe -a %s: no answer after %s", strings.Join(names, " "), timeout)
		}
		msg := strings.TrimSpace(stderr.String())
		if msg != "" {
			return fmt.Errorf("modules: modprobe -a %s: %w: %s", strings.Join(names, " "), err, msg)
		}
		return fmt.Errorf("modules: modprobe -a %s: %w", strings.Join(names, " "), err)
	}
	return nil
}

// ParseConf reads a modules list the way systemd-modules-load (which
// rdma-core's units run) does: one module per line, surrounding white space
// ignored, lines starting with '#' or ';' are comments.
func ParseConf(data []byte) []string {
	var mods []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || l[0] == '#' || l[0] == ';' {
			continue
		}
		mods = append(mods, l)
	}
	return mods
}

// driverTransports mirrors rdma-core's rdma-description.rules: it decides by
// the parent device's driver, so an mlx5 NIC pulls both infiniband.conf and
// roce.conf whatever its ports are set to today.
var driverTransports = map[string][]host.Transport{
	"mlx4_core": {host.TransportInfiniBand, host.TransportRoCE},
	"mlx5_core": {host.TransportInfiniBand, host.TransportRoCE},
	"qib":       {host.TransportInfiniBand},
	"hfi1":      {host.TransportOPA},
	"cxgb3":     {host.TransportIWARP},
	"cxgb4":     {host.TransportIWARP},
	"i40e":      {host.TransportIWARP},
	"nes":       {host.TransportIWARP},
	"be2net":    {host.TransportRoCE},
	"bnxt_en":   {host.TransportRoCE},
	"hns":       {host.TransportRoCE},
	"qede":      {host.TransportRoCE},
}

// ConfFiles returns the list names (without .conf) that apply to devs:
// "rdma" when any device exists, plus one per transport present.
func ConfFiles(devs []host.Device) []string {
	if len(devs) == 0 {
		return nil
	}
	set := map[string]bool{"rdma": true}
	for i := range devs {
		for _, t := range driverTransports[devs[i].Driver] {
			set[string(t)] = true
		}
		for _, t := range devs[i].Transports() {
			if t != host.TransportUnknown {
				set[string(t)] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Part is the modules host part of the reconciler.
type Part struct {
	Host   *host.Host
	Loader Loader
}

// Name implements reconcile.HostPart.
func (*Part) Name() string { return "modules" }

// Apply loads, in one call, every listed module that is not loaded yet.
func (p *Part) Apply(ctx context.Context, pol *config.Policy, devs []host.Device) []reconcile.Action {
	if !pol.Modules.Enable {
		return nil
	}
	lists := ConfFiles(devs)
	if len(lists) == 0 {
		return nil
	}
	dir := pol.Modules.Directory
	if dir == "" {
		dir = "/" + config.ModulesDir
	}
	var wanted []string
	var sources []string
	seen := map[string]bool{}
	for _, l := range lists {
		rel := filepath.Join(dir, l+".conf")
		data, err := os.ReadFile(p.Host.Path(rel))
		if errors.Is(err, fs.ErrNotExist) {
			continue // a transport without a list is normal
		}
		if err != nil {
			return []reconcile.Action{{Target: "modules", What: "read " + rel, Status: reconcile.Failed, Err: fmt.Errorf("modules: %w", err)}}
		}
		sources = append(sources, rel)
		for _, m := range ParseConf(data) {
			if strings.HasPrefix(m, "-") || strings.ContainsAny(m, " \t/") {
				return []reconcile.Action{{Target: "modules", What: "read " + rel, Status: reconcile.Failed,
					Err: fmt.Errorf("modules: %s: %q is not a module name", rel, m)}}
			}
			if n := host.NormalizeModule(m); !seen[n] {
				seen[n] = true
				wanted = append(wanted, m)
			}
		}
	}
	if len(wanted) == 0 {
		return nil
	}
	missing, err := p.Host.MissingModules(wanted)
	if err != nil {
		return []reconcile.Action{{Target: "modules", What: "load", Status: reconcile.Failed, Err: err}}
	}
	act := reconcile.Action{Target: "modules", What: "load", To: strings.Join(wanted, " "), Source: strings.Join(sources, " ")}
	if len(missing) == 0 {
		act.Status = reconcile.Unchanged
		return []reconcile.Action{act}
	}
	act.From = "missing: " + strings.Join(missing, " ")
	if err := p.Loader.Load(ctx, missing); err != nil {
		act.Status, act.Err = reconcile.Failed, err
		return []reconcile.Action{act}
	}
	act.Status = reconcile.Changed
	return []reconcile.Action{act}
}
