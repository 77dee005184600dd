package health_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/health"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// clock is a settable time.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// monitor watches a fixture host whose devices it reads directly.
func monitor(t *testing.T, h *host.Host, c *clock) *health.Monitor {
	t.Helper()
	return health.New(health.Options{Host: h, Now: c.now,
		Devices: func(names []string) []host.Device {
			devs, err := h.Devices()
			if err != nil {
				t.Fatal(err)
			}
			if names == nil {
				return devs
			}
			var out []host.Device
			for _, d := range devs {
				for _, n := range names {
					if d.Name == n {
						out = append(out, d)
					}
				}
			}
			return out
		}})
}

func counter(t *testing.T, v health.View, dev string, port int, name string) health.CounterView {
	t.Helper()
	pv, ok := v.Ports[health.PortKey{Device: dev, Port: port}]
	if !ok {
		t.Fatalf("no port %s/%d in the view", dev, port)
	}
	for _, c := range pv.Counters {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("%s/%d has no counter %s: %+v", dev, port, name, pv.Counters)
	return health.CounterView{}
}

func setCounter(t *testing.T, root, dev string, port int, dir, name string, v any) {
	t.Helper()
	hosttest.Write(t, root, fmt.Sprintf("sys/class/infiniband/%s/ports/%d/%s/%s", dev, port, dir, name), fmt.Sprintf("%v\n", v))
}

// The first sample of a port is its baseline: what a counter held before
// rdmad started is not an increase. Later samples count what rose within
// the hour, saturation is told, and a reset counts from 0 again.
func TestCountersCountIncreasesFromTheFirstSample(t *testing.T) {
	root := hosttest.Copy(t, "mlx4")
	c := &clock{t: time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)}
	m := monitor(t, host.New(root), c)
	m.Changed(true, nil, nil)
	m.Update()
	v := m.View()
	if got := counter(t, v, "mlx4_0", 1, "port_xmit_discards"); !got.Available || got.Value != 17 || got.Increase != 0 {
		t.Errorf("baseline: %+v (17 from before rdmad started is not news)", got)
	}
	if got := counter(t, v, "mlx4_0", 1, "link_downed"); got.Max != 255 || got.Saturated {
		t.Errorf("link_downed: %+v", got)
	}

	c.add(time.Minute)
	setCounter(t, root, "mlx4_0", 1, "counters", "symbol_error", 40)
	setCounter(t, root, "mlx4_0", 1, "counters", "link_downed", 255)
	m.SampleAll()
	c.add(time.Minute)
	setCounter(t, root, "mlx4_0", 1, "counters", "symbol_error", 65535)
	m.SampleAll()
	v = m.View()
	if got := counter(t, v, "mlx4_0", 1, "symbol_error"); got.Increase != 65535 || !got.Saturated || got.Max != 65535 {
		t.Errorf("symbol_error: %+v", got)
	}
	if got := counter(t, v, "mlx4_0", 1, "link_downed"); got.Increase != 254 || !got.Saturated {
		t.Errorf("link_downed at 255 (8 bits): %+v", got)
	}
	if got := counter(t, v, "mlx4_0", 2, "symbol_error"); got.Increase != 0 {
		t.Errorf("port 2 rose: %+v", got)
	}

	// perfquery -R: back to 0, then 5 more.
	c.add(time.Minute)
	setCounter(t, root, "mlx4_0", 1, "counters", "symbol_error", 5)
	m.SampleAll()
	if got := counter(t, m.View(), "mlx4_0", 1, "symbol_error"); got.Increase != 65540 || got.Saturated {
		t.Errorf("after a reset: %+v", got)
	}

	// An hour later only what rose within the hour counts.
	c.add(time.Hour)
	m.SampleAll()
	setCounter(t, root, "mlx4_0", 1, "counters", "symbol_error", 9)
	c.add(time.Minute)
	m.SampleAll()
	got := counter(t, m.View(), "mlx4_0", 1, "symbol_error")
	if got.Increase != 4 || got.Since.Before(c.now().Add(-health.Window)) {
		t.Errorf("an hour on: %+v", got)
	}
}

// "N/A (no PMA)", EINVAL, absence and garbage are "not available", never
// zero; a counter that becomes readable starts a baseline then.
func TestCountersNotAvailableAreNeverZero(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	k := hosttest.NewKernel(root)
	setCounter(t, root, "mlx5_0", 1, "counters", "symbol_error", "N/A (no PMA)")
	setCounter(t, root, "mlx5_0", 1, "counters", "port_rcv_errors", "garbage")
	k.FailReads("mlx5_0/ports/1/counters/link_error_recovery", syscall.EINVAL)
	c := &clock{t: time.Now()}
	m := monitor(t, k.Host(), c)
	m.Changed(true, nil, nil)
	m.Update()
	v := m.View()
	for name, why := range map[string]string{"symbol_error": "N/A (no PMA)", "link_error_recovery": "EINVAL", "port_rcv_errors": "not a number", "VL15_dropped": ""} {
		got := counter(t, v, "mlx5_0", 1, name)
		if why == "" {
			if !got.Available {
				t.Errorf("%s: %+v", name, got)
			}
			continue
		}
		if got.Available || got.Why != why || got.Value != 0 {
			t.Errorf("%s: %+v, want not available (%s)", name, got, why)
		}
	}
	// rxe has no PortCounters at all.
	rxe := hosttest.Copy(t, "rxe")
	mr := monitor(t, host.New(rxe), c)
	mr.Changed(true, nil, nil)
	mr.Update()
	if got := counter(t, mr.View(), "rxe0", 1, "symbol_error"); got.Available || got.Why != "absent" {
		t.Errorf("rxe0 symbol_error: %+v", got)
	}
}

// The link-up time is when the monitor first saw LinkUp, kept while it
// stays up; ports of removed devices are forgotten; carrier losses are
// counted within the window.
func TestLinkUpSinceCarrierAndRemoval(t *testing.T) {
	root := hosttest.Copy(t, "mlx4")
	c := &clock{t: time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)}
	m := monitor(t, host.New(root), c)
	start := c.now()
	m.Changed(false, []string{"mlx4_0"}, nil)
	m.Update()
	c.add(30 * time.Second)
	m.Changed(false, []string{"mlx4_0"}, nil)
	m.Update()
	v := m.View()
	if got := v.Ports[health.PortKey{Device: "mlx4_0", Port: 1}]; !got.LinkUpSince.Equal(start) || v.Start != start {
		t.Errorf("LinkUpSince %v, start %v; want %v", got.LinkUpSince, v.Start, start)
	}
	if got := v.Ports[health.PortKey{Device: "mlx4_0", Port: 2}].Netdev; got != "ens2" {
		t.Errorf("port 2 netdev %q", got)
	}
	hosttest.Write(t, root, "sys/class/infiniband/mlx4_0/ports/1/phys_state", "2: Polling\n")
	m.Changed(false, []string{"mlx4_0"}, nil)
	m.Update()
	if got := m.View().Ports[health.PortKey{Device: "mlx4_0", Port: 1}].LinkUpSince; !got.IsZero() {
		t.Errorf("Polling: LinkUpSince %v", got)
	}
	hosttest.Write(t, root, "sys/class/infiniband/mlx4_0/ports/1/phys_state", "5: LinkUp\n")
	c.add(time.Minute)
	m.Changed(false, []string{"mlx4_0"}, nil)
	m.Update()
	if got := m.View().Ports[health.PortKey{Device: "mlx4_0", Port: 1}].LinkUpSince; !got.Equal(c.now()) {
		t.Errorf("up again: LinkUpSince %v, want %v", got, c.now())
	}

	m.CarrierLost("ens2")
	c.add(30 * time.Minute)
	m.CarrierLost("ens2")
	if n := m.View().CarrierLosses["ens2"]; n != 2 {
		t.Errorf("carrier losses %d", n)
	}
	c.add(45 * time.Minute)
	if n := m.View().CarrierLosses["ens2"]; n != 1 {
		t.Errorf("after the window: %d", n)
	}

	m.Changed(false, nil, []string{"mlx4_0"})
	m.Update()
	if n := len(m.View().Ports); n != 0 {
		t.Errorf("%d ports left after removal", n)
	}
}

// Run samples at the policy's interval: a counter that rises between two
// ticks is seen without any event.
func TestRunSamplesAtTheInterval(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	h := host.New(root)
	pol, err := config.Parse("f.toml", []byte("[doctor.counters]\ninterval = \"1s\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	m := health.New(health.Options{Host: h, Policy: func() *config.Policy { return pol },
		Devices: func([]string) []host.Device { d, _ := h.Devices(); return d }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go m.Run(ctx)
	m.Changed(true, nil, nil)
	waitFor(t, func() bool { _, ok := m.View().Ports[health.PortKey{Device: "mlx5_1", Port: 1}]; return ok })
	setCounter(t, root, "mlx5_1", 1, "hw_counters", "out_of_sequence", 5000)
	waitFor(t, func() bool {
		pv := m.View().Ports[health.PortKey{Device: "mlx5_1", Port: 1}]
		for _, c := range pv.Counters {
			if c.Name == "out_of_sequence" {
				return c.Increase == 4988
			}
		}
		return false
	})
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second) // guards a hang only
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Every counter doctor watches that the kernel reads from the PMA has its
// width; the others are 64-bit driver statistics.
func TestWidthsCoverThePMACounters(t *testing.T) {
	for _, c := range config.Counters {
		if got := health.Max(c.Name) != 0; got == c.HW {
			t.Errorf("%s: hw_counters %v but saturation max %d", c.Name, c.HW, health.Max(c.Name))
		}
	}
	if health.Max("local_link_integrity_errors") != 15 || health.Max("symbol_error") != 65535 {
		t.Error("4-bit and 16-bit maxima")
	}
}

// A counter the driver lacks is not read again at every interval, only
// after the device is looked at again; a virtual function's ports are not
// sampled at all (their link is their physical function's).
func TestAbsentCountersAndVirtualFunctions(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	c := &clock{t: time.Now()}
	hw := "sys/class/infiniband/mlx5_0/ports/1/hw_counters/"
	if err := os.Remove(root + "/" + hw + "rx_icrc_encapsulated"); err != nil {
		t.Fatal(err)
	}
	m2 := monitor(t, host.New(root), c)
	m2.Changed(true, nil, nil)
	m2.Update()
	hosttest.Write(t, root, hw+"rx_icrc_encapsulated", "3\n")
	m2.SampleAll()
	if got := counter(t, m2.View(), "mlx5_0", 1, "rx_icrc_encapsulated"); got.Available {
		t.Errorf("an absent counter was read again at the interval: %+v", got)
	}
	m2.Changed(false, []string{"mlx5_0"}, nil)
	m2.Update()
	if got := counter(t, m2.View(), "mlx5_0", 1, "rx_icrc_encapsulated"); got.Available || got.Why != "absent" {
		t.Errorf("looked at again, before the next sample: %+v", got)
	}
	m2.SampleAll()
	if got := counter(t, m2.View(), "mlx5_0", 1, "rx_icrc_encapsulated"); !got.Available || got.Value != 3 {
		t.Errorf("after the device was looked at again: %+v", got)
	}

	hosttest.Write(t, root, "sys/class/infiniband/mlx5_1/device/physfn/uevent", "")
	m3 := monitor(t, host.New(root), c)
	m3.Changed(true, nil, nil)
	m3.Update()
	m3.SampleAll()
	pv := m3.View().Ports[health.PortKey{Device: "mlx5_1", Port: 1}]
	if !pv.VF || !pv.To.IsZero() || len(pv.Counters) != 0 {
		t.Errorf("a VF's port was sampled: %+v", pv)
	}
}
