// Package health is what the running daemon observes over time for doctor:
// each port's error counters, sampled as the port is first seen and every
// [doctor.counters] interval after; the losses of carrier rtnetlink
// reports on RoCE netdevs; and since when each port's physical link has
// been up. Doctor judges a moment; these need a history, which only the
// daemon has.
//
// The monitor reads only counter files, through host's bounded reader, on
// its own goroutine: the reconciler's listener only marks which devices
// changed (Changed), as the bus's does.
package health

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"math"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
)

// Window is how far back increases are counted: thresholds are per hour.
const Window = time.Hour

// widths are the bits of the InfiniBand PortCounters doctor watches, as
// the kernel reads them from the PMA (drivers/infiniband/core/sysfs.c,
// PORT_PMA_ATTR): they saturate at 2^bits - 1 instead of wrapping. The
// driver statistics of hw_counters/ are 64-bit.
var widths = map[string]uint{
	"symbol_error":                    16,
	"link_error_recovery":             8,
	"link_downed":                     8,
	"port_rcv_errors":                 16,
	"port_rcv_remote_physical_errors": 16,
	"port_rcv_switch_relay_errors":    16,
	"port_xmit_discards":              16,
	"port_xmit_constraint_errors":     8,
	"port_rcv_constraint_errors":      8,
	"local_link_integrity_errors":     4,
	"excessive_buffer_overrun_errors": 4,
	"VL15_dropped":                    16,
}

// Max is the value at which counter name saturates; 0 for a 64-bit
// counter, which does not in practice.
func Max(name string) uint64 {
	if b, ok := widths[name]; ok {
		return 1<<b - 1
	}
	return 0
}

// PortKey names a port of a device.
type PortKey struct {
	Device string
	Port   int
}

func (k PortKey) String() string { return k.Device + "/" + strconv.Itoa(k.Port) }

// Options configures a Monitor.
type Options struct {
	Host *host.Host
	// Policy is the policy in force: its [doctor.counters] interval.
	Policy func() *config.Policy
	// Devices returns the observed devices named (nil: every one), from
	// the reconciler's state: the monitor walks no sysfs of its own.
	Devices func(names []string) []host.Device
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Changed, when set, is called after a sample that changed what View
	// shows of the counters (a new port, a counter that moved, one that
	// became available or not): doctor's findings are worth a new run.
	Changed func()
}

// Monitor keeps the history doctor reads through View.
type Monitor struct {
	o     Options
	start time.Time
	wake  chan struct{}

	mu      sync.Mutex
	ports   map[PortKey]*portHistory
	netdevs map[string][]time.Time // carrier losses within the window
	// Marks from Changed, drained by the monitor's goroutine.
	dirty   map[string]bool
	removed map[string]bool
	all     bool
}

type portHistory struct {
	linkUpSince time.Time // zero: the link was not up when last seen
	netdev      string
	// vf: the port of a virtual function, whose link is its physical
	// function's: not sampled (an SR-IOV host has hundreds of them).
	vf          bool
	first, last time.Time // first and last sample; zero: never sampled
	// counters are in config.Counters order, nil until the first sample:
	// one allocation per port, not one per counter (2,048 ports would
	// hold 39k of them).
	counters []counterHistory
	// moves are the samples at which a counter's value changed after its
	// base, oldest first, every counter's in one list: most counters of
	// most ports never move, and cost no list of their own.
	moves []move
	// texts are the words of counters whose file held text instead of a
	// number ("N/A (no PMA)"), by counter; nil while none did.
	texts []string
}

// counterHistory is one counter of one port: its state as last read and
// its base, the oldest sample kept (the last one before the window's
// start: the value the increase counts from). Later values are the
// port's moves of this counter.
type counterHistory struct {
	base  sample
	state counterState
	// reread: an absent counter is read again at the next sample (its
	// device was looked at again); otherwise it is not.
	reread bool
}

// counterState is a counter's state as last read.
type counterState uint8

const (
	available counterState = iota
	// absent: the driver does not have it; not read again until the
	// device is looked at again (Update).
	absent
	einval     // EINVAL: no answer from the PMA, as the kernel reports it
	unreadable // any other error
	notNumber  // neither a number nor "N/A" text
	text       // the file held text: portHistory.texts has it
)

// why is the word View gives for a state other than available.
var why = [...]string{absent: "absent", einval: "EINVAL", unreadable: "unreadable", notNumber: "not a number"}

// sample is a counter's value at a time (Unix nanoseconds; 0: none yet).
type sample struct {
	at    int64
	value uint64
}

// move is a sample of counter i (config.Counters order) that changed its
// value.
type move struct {
	sample
	i int
}

// New makes a monitor; Run samples.
func New(o Options) *Monitor {
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Monitor{o: o, start: o.Now(), wake: make(chan struct{}, 1),
		ports: map[PortKey]*portHistory{}, netdevs: map[string][]time.Time{},
		dirty: map[string]bool{}, removed: map[string]bool{}}
}

// Changed marks what a pass changed (reconcile.Change): devices updated
// are looked at again (their link state, a baseline sample of new ports),
// removed ones forgotten. It only marks; Run does the work.
func (m *Monitor) Changed(full bool, updated, removed []string) {
	m.mu.Lock()
	m.all = m.all || full
	for _, n := range updated {
		m.dirty[n] = true
		delete(m.removed, n)
	}
	for _, n := range removed {
		m.removed[n] = true
		delete(m.dirty, n)
	}
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// CarrierLost records that netdev lost its carrier while administratively
// up (rtnetlink: IFF_LOWER_UP cleared, IFF_UP set).
func (m *Monitor) CarrierLost(netdev string) {
	now := m.o.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.netdevs[netdev] = append(pruneTimes(m.netdevs[netdev], now.Add(-Window)), now)
}

func pruneTimes(ts []time.Time, from time.Time) []time.Time {
	i := 0
	for i < len(ts) && ts[i].Before(from) {
		i++
	}
	return append(ts[:0], ts[i:]...)
}

// interval is the sampling interval of the policy in force.
func (m *Monitor) interval() time.Duration {
	if m.o.Policy != nil {
		if p := m.o.Policy(); p != nil && p.Doctor.Counters.Interval > 0 {
			return p.Doctor.Counters.Interval
		}
	}
	return config.DefaultCounterInterval
}

// Run follows the marks and samples every port each interval until ctx
// ends.
func (m *Monitor) Run(ctx context.Context) {
	t := time.NewTimer(m.interval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.wake:
			m.Update()
		case <-t.C:
			m.Update()
			m.SampleAll()
			t.Reset(m.interval())
		}
	}
}

// Update takes the marks: it forgets removed devices, records the link
// state of the marked ones and samples the ports it had not seen.
func (m *Monitor) Update() {
	m.mu.Lock()
	all, dirty, removed := m.all, m.dirty, m.removed
	m.all, m.dirty, m.removed = false, map[string]bool{}, map[string]bool{}
	m.mu.Unlock()
	if !all && len(dirty) == 0 && len(removed) == 0 {
		return
	}
	var names []string
	if !all {
		for n := range dirty {
			names = append(names, n)
		}
		sort.Strings(names)
	}
	var devs []host.Device
	if m.o.Devices != nil && (all || len(names) > 0) {
		devs = m.o.Devices(names)
	}
	// The netdevs are read before the lock: PortNetdev lists the PCI
	// function's net/ directory.
	type portSeen struct {
		k      PortKey
		up, vf bool
		netdev string
	}
	var obs []portSeen
	for i := range devs {
		d := &devs[i]
		vf := m.o.Host.IsVF(d)
		for j := range d.Ports {
			p := &d.Ports[j]
			obs = append(obs, portSeen{PortKey{d.Name, p.Number}, p.PhysState == "LinkUp", vf, m.o.Host.PortNetdev(d, p)})
		}
	}
	now := m.o.Now()
	seen := map[PortKey]bool{}
	var fresh []PortKey
	m.mu.Lock()
	for k := range m.ports {
		if removed[k.Device] {
			delete(m.ports, k)
		}
	}
	for _, o := range obs {
		seen[o.k] = true
		h := m.ports[o.k]
		if h == nil {
			h = &portHistory{}
			m.ports[o.k] = h
			fresh = append(fresh, o.k)
		}
		h.netdev, h.vf = o.netdev, o.vf
		for i := range h.counters {
			h.counters[i].reread = true
		}
		switch {
		case !o.up:
			h.linkUpSince = time.Time{}
		case h.linkUpSince.IsZero():
			h.linkUpSince = now
		}
	}
	if all { // a full pass saw every device: the others are gone
		for k := range m.ports {
			if !seen[k] {
				delete(m.ports, k)
			}
		}
	}
	m.mu.Unlock()
	m.sample(fresh)
}

// SampleAll reads the counters of every known port but those of virtual
// functions.
func (m *Monitor) SampleAll() {
	m.mu.Lock()
	keys := make([]PortKey, 0, len(m.ports))
	for k, h := range m.ports {
		if !h.vf {
			keys = append(keys, k)
		}
	}
	m.mu.Unlock()
	m.sample(keys)
}

// reading is one counter as read.
type reading struct {
	value uint64
	state counterState
	text  string // state text: what the file held
}

// counterFiles are the counters' files relative to a port's directory,
// in config.Counters order: each sample opens the port's directory once
// and reads these relative to it, building no path.
var counterFiles = func() []host.AttrName {
	out := make([]host.AttrName, len(config.Counters))
	for i, c := range config.Counters {
		dir := "counters/"
		if c.HW {
			dir = "hw_counters/"
		}
		out[i] = host.NewAttrName(dir + c.Name)
	}
	return out
}()

// errReading is the reading of a counter whose read failed with err.
// Absent, "N/A (no PMA)" (a driver without a performance management
// agent), EINVAL (no answer from the PMA, as the kernel reports it) and
// anything that is not a number are "not available", never zero.
func errReading(err error) reading {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return reading{state: absent}
	case errors.Is(err, syscall.EINVAL):
		return reading{state: einval}
	}
	return reading{state: unreadable}
}

// readCounter reads counter i of the port whose directory is dir; prev
// is the text the counter held at the last sample, kept when the file
// holds it still.
func readCounter(dir *host.AttrDir, i int, buf *host.AttrBuf, prev string) reading {
	b, err := dir.Read(counterFiles[i], buf)
	if err != nil {
		return errReading(err)
	}
	b = bytes.TrimSpace(b)
	if bytes.HasPrefix(b, []byte("N/A")) {
		if string(b) == prev {
			return reading{state: text, text: prev}
		}
		return reading{state: text, text: string(b)}
	}
	v, ok := parseCounter(b)
	if !ok {
		return reading{state: notNumber}
	}
	return reading{value: v}
}

// parseCounter parses a counter's decimal value.
func parseCounter(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

func (m *Monitor) sample(keys []PortKey) {
	changed := false
	read := make([]reading, len(config.Counters)) // in config.Counters order, reused
	skip := make([]bool, len(config.Counters))
	texts := make([]string, len(config.Counters))
	var buf host.AttrBuf
	for _, k := range keys {
		clear(skip)
		clear(texts)
		m.mu.Lock()
		if h := m.ports[k]; h != nil {
			if h.vf {
				m.mu.Unlock()
				continue
			}
			for i := range h.counters {
				skip[i] = h.counters[i].state == absent && !h.counters[i].reread
			}
			copy(texts, h.texts)
		}
		m.mu.Unlock()
		dir, err := m.o.Host.OpenAttrDir(host.ClassInfiniband, k.Device, "ports", strconv.Itoa(k.Port))
		for i := range config.Counters {
			switch {
			case skip[i]:
				read[i] = reading{state: absent}
			case err != nil:
				read[i] = errReading(err)
			default:
				read[i] = readCounter(&dir, i, &buf, texts[i])
			}
		}
		dir.Close()
		now := m.o.Now()
		m.mu.Lock()
		if h := m.ports[k]; h != nil { // not removed meanwhile
			changed = h.record(now, read) || changed
		}
		m.mu.Unlock()
	}
	if changed && m.o.Changed != nil {
		m.o.Changed()
	}
}

// record adds a sample, read in config.Counters order; it reports whether
// it changed anything but the time of the last sample.
func (h *portHistory) record(now time.Time, read []reading) (changed bool) {
	if h.first.IsZero() {
		h.first, changed = now, true
	}
	h.last = now
	if h.counters == nil {
		h.counters = make([]counterHistory, len(read))
	}
	at := now.UnixNano()
	for i, r := range read {
		c := &h.counters[i]
		c.reread = false
		if c.state != r.state || (r.state == text && h.texts[i] != r.text) {
			c.state, changed = r.state, true
			if r.state == text || h.texts != nil {
				if h.texts == nil {
					h.texts = make([]string, len(read))
				}
				h.texts[i] = r.text
			}
		}
		if r.state != available {
			continue
		}
		switch last := h.value(i); {
		case c.base.at == 0:
			c.base = sample{at, r.value}
			changed = true
		case last != r.value:
			h.moves = append(h.moves, move{sample{at, r.value}, i})
			changed = true
		}
	}
	h.prune(now.Add(-Window).UnixNano())
	return changed
}

// value is counter i's last value.
func (h *portHistory) value(i int) uint64 {
	for j := len(h.moves) - 1; j >= 0; j-- {
		if h.moves[j].i == i {
			return h.moves[j].value
		}
	}
	return h.counters[i].base.value
}

// prune makes each counter's last move at or before from its base: the
// increase within the window counts from it.
func (h *portHistory) prune(from int64) {
	n := 0
	for n < len(h.moves) && h.moves[n].at <= from {
		h.counters[h.moves[n].i].base = h.moves[n].sample
		n++
	}
	if n == 0 {
		return
	}
	h.moves = append(h.moves[:0], h.moves[n:]...)
	if len(h.moves) == 0 {
		h.moves = nil // a port that moved once holds no list for good
	}
}
