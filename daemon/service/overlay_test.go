package service

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
)

func intp(n int) *int { return &n }

// setRoCE is what a SetRoCE call without persist does to the overlay.
func setRoCE(o *Overlay, device string, port int, mode config.RoCEMode, tos *int) {
	o.RoCE = config.MergeRule(o.RoCE, config.Runtime(config.RoCERule{Selector: config.Selector{Device: config.Exact(device)}, Port: port, Mode: mode, TOS: tos}))
}

// forgetRoCE is what persisting mode and/or TOS does to the overlay.
func forgetRoCE(o *Overlay, device string, port int, ports []int, mode, tos bool) {
	r := config.RoCERule{Selector: config.Selector{Device: config.Exact(device)}, Port: port}
	if mode {
		r.Mode = config.RoCEv1
	}
	if tos {
		r.TOS = intp(0)
	}
	o.RoCE = config.ForgetRule(o.RoCE, r, ports)
}

func filePos(line int) config.Position {
	return config.Position{File: "/etc/rdma/rdmad.toml", Line: line}
}

// Runtime RoCE rules come after the files' rules, so they win field by
// field; what they do not set still comes from the files. The base policy
// is not modified.
func TestOverlayApplyRoCEPrecedence(t *testing.T) {
	base := &config.Policy{RoCE: []config.RoCERule{
		{Source: filePos(3), Selector: config.Selector{Device: config.Glob("mlx5_*")}, Mode: config.RoCEv1, TOS: intp(5)},
	}}
	var o Overlay
	setRoCE(&o, "mlx5_0", 1, "", intp(77))
	setRoCE(&o, "mlx5_0", 0, config.RoCEv2, nil)
	p := o.Apply(base)

	d := p.RoCEFor(config.Target{Name: "mlx5_0"}, 1)
	if d.Mode != config.RoCEv2 || d.ModeSource.File != config.RuntimeFile {
		t.Errorf("mlx5_0/1 mode = %s from %s, want v2 from runtime", d.Mode, d.ModeSource)
	}
	if d.TOS == nil || *d.TOS != 77 || d.TOSSource.File != config.RuntimeFile {
		t.Errorf("mlx5_0/1 tos = %v from %s, want 77 from runtime", d.TOS, d.TOSSource)
	}
	d = p.RoCEFor(config.Target{Name: "mlx5_0"}, 2)
	if d.TOS == nil || *d.TOS != 5 || d.TOSSource != filePos(3) {
		t.Errorf("mlx5_0/2 tos = %v from %s, want the file's 5 (the runtime tos is for port 1)", d.TOS, d.TOSSource)
	}
	d = p.RoCEFor(config.Target{Name: "mlx5_1"}, 1)
	if d.Mode != config.RoCEv1 || *d.TOS != 5 {
		t.Errorf("mlx5_1/1 = %+v, want the file's rule only", d)
	}
	if len(base.RoCE) != 1 {
		t.Errorf("Apply modified the base policy: %d rules", len(base.RoCE))
	}
}

// A device name with glob characters selects only itself.
func TestOverlaySetRoCEEscapesDeviceName(t *testing.T) {
	var o Overlay
	setRoCE(&o, "dev[1]", 0, config.RoCEv2, nil)
	p := o.Apply(nil)
	if d := p.RoCEFor(config.Target{Name: "dev1"}, 1); !d.Empty() {
		t.Errorf("dev1 matched the runtime rule for dev[1]: %+v", d)
	}
	if d := p.RoCEFor(config.Target{Name: "dev[1]"}, 1); d.Mode != config.RoCEv2 {
		t.Errorf("dev[1] = %+v", d)
	}
}

// Persisting a field forgets the runtime value of that field only, and a
// runtime rule for every port is split so the other ports keep it.
func TestOverlayForgetRoCEOnPersist(t *testing.T) {
	var o Overlay
	setRoCE(&o, "mlx5_0", 0, config.RoCEv2, intp(77))
	setRoCE(&o, "mlx5_1", 1, config.RoCEv1, nil)
	forgetRoCE(&o, "mlx5_0", 1, []int{1, 2}, false, true)
	p := o.Apply(nil)

	d := p.RoCEFor(config.Target{Name: "mlx5_0"}, 1)
	if d.TOS != nil || d.Mode != config.RoCEv2 {
		t.Errorf("mlx5_0/1 = %+v, want mode v2 kept and tos forgotten", d)
	}
	d = p.RoCEFor(config.Target{Name: "mlx5_0"}, 2)
	if d.TOS == nil || *d.TOS != 77 || d.Mode != config.RoCEv2 {
		t.Errorf("mlx5_0/2 = %+v, want both kept", d)
	}
	if d := p.RoCEFor(config.Target{Name: "mlx5_1"}, 1); d.Mode != config.RoCEv1 {
		t.Errorf("another device's rule was forgotten: %+v", d)
	}

	forgetRoCE(&o, "mlx5_0", 0, []int{1, 2}, true, true)
	forgetRoCE(&o, "mlx5_1", 0, []int{1}, true, false)
	if !o.Empty() {
		t.Errorf("overlay after forgetting everything: %+v", o.RoCE)
	}
}

func TestOverlayApplyLinks(t *testing.T) {
	base := &config.Policy{Links: []config.Link{
		{Source: filePos(7), Name: "rxe0", Type: config.LinkRXE, Netdev: "eth0"},
		{Source: filePos(12), Name: "siw0", Type: config.LinkSIW, Netdev: "eth0"},
	}}
	var o Overlay
	o.addLink(config.Link{Name: "rxe0", Type: config.LinkRXE, Netdev: "eth1"})
	o.deleteLink("siw0")
	o.addLink(config.Link{Name: "rxe1", Type: config.LinkRXE, Netdev: "eth2"})
	p := o.Apply(base)
	want := []config.Link{
		{Source: config.Position{File: config.RuntimeFile}, Name: "rxe0", Type: config.LinkRXE, Netdev: "eth1"},
		{Source: config.Position{File: config.RuntimeFile}, Name: "rxe1", Type: config.LinkRXE, Netdev: "eth2"},
	}
	if !reflect.DeepEqual(p.Links, want) {
		t.Errorf("links = %+v\nwant %+v", p.Links, want)
	}

	// Persisting forgets every runtime statement about the link.
	o.forgetLink("rxe0")
	o.forgetLink("siw0")
	p = o.Apply(base)
	if src, _ := p.LinkSource("rxe0"); src != filePos(7) {
		t.Errorf("rxe0 after forget from %s, want the file", src)
	}
	if _, ok := p.LinkSource("siw0"); !ok {
		t.Error("siw0 still deleted after forget")
	}
}

// The runtime netns mode is kept apart from the files' mode, which alone
// goes to modprobe.d for the next boot.
func TestOverlayApplyNetns(t *testing.T) {
	base := &config.Policy{Netns: config.Netns{Mode: config.NetnsShared}}
	o := Overlay{Netns: config.NetnsExclusive}
	p := o.Apply(base)
	if p.Netns.Mode != config.NetnsShared || p.Netns.Runtime != config.NetnsExclusive {
		t.Errorf("netns = %+v, want files' shared and runtime exclusive", p.Netns)
	}
	if base.Netns.Runtime != config.NetnsUnmanaged {
		t.Errorf("Apply modified the base: %+v", base.Netns)
	}
	if p := (Overlay{}).Apply(base); p.Netns != base.Netns {
		t.Errorf("empty overlay changed netns: %+v", p.Netns)
	}
}

func TestOverlayCloneIsDeep(t *testing.T) {
	var o Overlay
	setRoCE(&o, "a", 0, config.RoCEv2, nil)
	o.addLink(config.Link{Name: "rxe0", Type: config.LinkRXE, Netdev: "eth0"})
	c := o.clone()
	c.RoCE[0].Mode = config.RoCEv1
	c.Links[0].Name = "x"
	if o.RoCE[0].Mode != config.RoCEv2 || o.Links[0].Name != "rxe0" {
		t.Errorf("clone shares storage: %+v", o)
	}
}

// Repeated runtime SetRoCE calls replace what they change instead of
// piling up rules, and the policy they give is exactly the one appending
// every call would give.
func TestOverlaySetRoCEReplacesAndStaysSmall(t *testing.T) {
	var o, appended Overlay
	devices := []string{"mlx5_0", "mlx5_1", "dev[1]"}
	modes := []config.RoCEMode{"", config.RoCEv1, config.RoCEv2}
	r := uint32(1)
	next := func(n int) int { // a small deterministic generator
		r = r*1103515245 + 12345
		return int(r>>16) % n
	}
	for i := 0; i < 5000; i++ {
		dev, port, mode := devices[next(3)], next(4), modes[next(3)]
		var tos *int
		if next(2) == 0 || mode == "" {
			tos = intp(next(256))
		}
		setRoCE(&o, dev, port, mode, tos)
		appended.RoCE = append(appended.RoCE, config.RoCERule{
			Source: config.Position{File: config.RuntimeFile}, Selector: config.Selector{Device: config.Exact(dev)},
			Port: port, Mode: mode, TOS: tos,
		})
		if len(o.RoCE) > len(devices)*4*2 {
			t.Fatalf("after %d calls the overlay holds %d rules", i+1, len(o.RoCE))
		}
		if i%97 != 0 {
			continue
		}
		got, want := o.Apply(nil), appended.Apply(nil)
		for _, d := range devices {
			for p := 1; p <= 3; p++ {
				g, w := got.RoCEFor(config.Target{Name: d}, p), want.RoCEFor(config.Target{Name: d}, p)
				if g.Mode != w.Mode || (g.TOS == nil) != (w.TOS == nil) || (g.TOS != nil && *g.TOS != *w.TOS) {
					t.Fatalf("after %d calls %s/%d = %+v, appending every call gives %+v", i+1, d, p, g, w)
				}
			}
		}
	}
}

// Declared gives a policy and an overlay that agree while runtime changes
// land: every runtime link is in the policy and nothing else is (the files
// declare none). Read one after the other, a change in between makes them
// disagree (Describe shows both).
func TestDeclaredPolicyAndOverlayAgree(t *testing.T) {
	s := &Service{}
	s.setPolicy(&config.Policy{})
	const changes = 2000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range changes {
			s.changeOverlay(func(o *Overlay) {
				if i%2 == 0 {
					o.addLink(config.Link{Name: fmt.Sprintf("rxe%d", i), Type: config.LinkRXE, Netdev: "eth1"})
				} else {
					o.forgetLink(fmt.Sprintf("rxe%d", i-1))
				}
			})
		}
	}()
	for reads := 0; ; reads++ {
		select {
		case <-done:
			if reads == 0 {
				t.Fatal("no read while the overlay changed")
			}
			return
		default:
		}
		pol, ov := s.Declared()
		if len(pol.Links) != len(ov.Links) || len(ov.Links) == 1 && pol.Links[0].Name != ov.Links[0].Name {
			t.Fatalf("read %d: the policy has links %v, the overlay %v", reads, pol.Links, ov.Links)
		}
	}
}
