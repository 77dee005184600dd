package fixturekernel

import (
	"context"
	"fmt"
	"log/slog"
	"path"
	"path/filepath"
	"reflect"
	"slices"

	"github.com/fsnotify/fsnotify"

	"github.com/rdmad/rdmad/daemon/host"
)

// Watcher is the fixture kernel's notifications: a change of the state
// file (rdmad's own writes and anyone else's) is announced as the kernel
// announces that change. A changed DCB (its IEEE objects or APP table) is
// what dcbnl multicasts after every IEEE set or delete (RTNLGRP_DCB), a
// changed global pause ethtool's pause notification: both ask for the
// netdev's settings to be read again (Recheck). A changed PFC enable mask
// of an mlx5 netdev toggles its link (mlx5e_dcbnl_ieee_setpfc calls
// mlx5_toggle_port_link), which rtnetlink reports as a loss of carrier
// and its return (CarrierLost, then StateChanged). The DCBX mode and the
// PFC storm timeout are not announced by the kernel, and not here either:
// rdmad's verify read-back finds them.
type Watcher struct {
	Host         *host.Host
	Recheck      func(netdev string)
	CarrierLost  func(netdev string)
	StateChanged func(netdev string)
	// DCBChanged and PauseChanged, when set, are told which of the two
	// notifications a Recheck stands for (rdmactl qualify times each).
	DCBChanged   func(netdev string)
	PauseChanged func(netdev string)
	// RequestAll asks for everything to be read again: notifications
	// were lost (the inotify queue overflowed).
	RequestAll func()
	// Ready, when set, is called once the file is watched and its state
	// read: every change from then on is announced.
	Ready func()
	Log   *slog.Logger

	last *State
}

// Run watches the state file's directory until ctx ends. It returns an
// error when the directory cannot be watched (events.RunAll restarts it).
func (w *Watcher) Run(ctx context.Context) error {
	log := w.Log
	if log == nil {
		log = slog.Default()
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", Dir, err)
	}
	defer fw.Close()
	dir := w.Host.Path(Dir)
	if err := fw.Add(dir); err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	k := New(w.Host)
	if s, err := k.Read(); err == nil {
		w.last = s
	} else {
		log.Warn("the fixture's kernel state does not read; its changes are announced once it does", "err", err)
	}
	if w.Ready != nil {
		w.Ready()
	}
	name := path.Base(File)
	for {
		select {
		case <-ctx.Done():
			return nil
		case err, ok := <-fw.Errors:
			if !ok {
				return fmt.Errorf("watch %s: closed", dir)
			}
			log.Warn("fixture kernel notifications lost; reading everything again", "err", err)
			if w.RequestAll != nil {
				w.RequestAll()
			}
		case ev, ok := <-fw.Events:
			if !ok {
				return fmt.Errorf("watch %s: closed", dir)
			}
			if filepath.Base(ev.Name) != name || ev.Op == fsnotify.Chmod {
				continue
			}
			s, err := k.Read()
			if err != nil {
				// A writer that does not rename into place is seen half
				// way; its next write is seen whole.
				log.Debug("the fixture's kernel state does not read", "err", err)
				continue
			}
			w.announce(w.last, s)
			w.last = s
		}
	}
}

// announce tells what changed from old to cur, netdev by netdev in name
// order (old nil: nothing is known to have changed).
func (w *Watcher) announce(old, cur *State) {
	if old == nil {
		return
	}
	for _, name := range cur.names() {
		n, was := cur.Netdevs[name], old.Netdevs[name]
		if was == nil {
			continue // a netdev the kernel did not hold before: not a change of it
		}
		dcbChanged, pauseChanged := !reflect.DeepEqual(dcbIEEE(was), dcbIEEE(n)), !reflect.DeepEqual(was.Pause, n.Pause)
		if dcbChanged || pauseChanged {
			call(w.Recheck, name)
		}
		if dcbChanged {
			call(w.DCBChanged, name)
		}
		if pauseChanged {
			call(w.PauseChanged, name)
		}
		if n.mlx5() && pfcMask(was) != pfcMask(n) {
			call(w.CarrierLost, name)
			call(w.StateChanged, name)
		}
	}
}

// dcbIEEE is what dcbnl's notification carries: the IEEE objects and the
// APP table, not the DCBX mode.
func dcbIEEE(n *Netdev) any {
	if n.DCB == nil {
		return nil
	}
	d := *n.DCB
	d.DCBX = nil
	d.App = slices.Clone(d.App)
	if d.App == nil {
		d.App = []App{}
	}
	return d
}

func pfcMask(n *Netdev) uint8 {
	if n.DCB == nil || n.DCB.PFC == nil {
		return 0
	}
	return n.DCB.PFC.value().Enabled
}

func call(fn func(string), name string) {
	if fn != nil {
		fn(name)
	}
}
