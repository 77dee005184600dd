package service

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/rdmad/rdmad/daemon/config"
)

// Overlay holds changes made over D-Bus without "persist". It is applied on
// top of the policy loaded from the files, so its entries win, and it lives
// until rdmad stops: a Reload re-reads the files and re-applies the overlay,
// as `networkctl reload` keeps runtime-only changes of networkd.
type Overlay struct {
	RoCE         []config.RoCERule // appended after the files' rules
	QoS          []config.QoSRule  // appended after the files' rules
	Links        []config.Link     // added at runtime; replace a declared link of the same name
	DeletedLinks []string          // declared links removed at runtime
	Netns        config.NetnsMode  // NetnsUnmanaged: no runtime override
	// NetnsNote is who set Netns, and when; each rule and link carries
	// its own Note.
	NetnsNote config.Note
}

// DefaultMaxRuntimeEntries bounds the runtime overlay: RoCE rules and
// links each. Calls replace what they change, so only many distinct
// devices, ports or links come near it; beyond it a runtime change is
// refused (persisting still works), so callers cannot grow rdmad's memory
// without bound.
const DefaultMaxRuntimeEntries = 1024

// Empty reports whether there are no runtime changes.
func (o Overlay) Empty() bool {
	return len(o.RoCE) == 0 && len(o.QoS) == 0 && len(o.Links) == 0 && len(o.DeletedLinks) == 0 && o.Netns == config.NetnsUnmanaged
}

func (o Overlay) clone() Overlay {
	c := Overlay{Netns: o.Netns, NetnsNote: o.NetnsNote}
	c.RoCE = slices.Clone(o.RoCE)
	c.QoS = slices.Clone(o.QoS)
	c.Links = slices.Clone(o.Links)
	c.DeletedLinks = slices.Clone(o.DeletedLinks)
	return c
}

// Apply returns base with the overlay on top; base is not modified.
func (o Overlay) Apply(base *config.Policy) *config.Policy {
	if base == nil {
		base = &config.Policy{}
	}
	p := *base
	p.RoCE = append(slices.Clone(base.RoCE), o.RoCE...)
	p.QoS = append(slices.Clone(base.QoS), o.QoS...)
	var links []config.Link
	p.ShadowedLinks = slices.Clone(base.ShadowedLinks)
	for _, l := range base.Links {
		if slices.Contains(o.DeletedLinks, l.Name) {
			p.ShadowedLinks = append(p.ShadowedLinks, config.ShadowedLink{Link: l, By: config.Position{File: config.RuntimeFile}, Deleted: true})
			continue
		}
		links = append(links, l)
	}
	for _, l := range o.Links {
		for _, old := range links {
			if old.Name == l.Name {
				p.ShadowedLinks = append(p.ShadowedLinks, config.ShadowedLink{Link: old, By: l.Source})
			}
		}
		links = slices.DeleteFunc(links, func(old config.Link) bool { return old.Name == l.Name })
		links = append(links, l)
	}
	p.Links = links
	// The runtime mode is kept apart from the files' one: it is switched in
	// the kernel, but only the declared mode goes to modprobe.d for the
	// next boot.
	p.Netns.Runtime, p.Netns.RuntimeNote = o.Netns, o.NetnsNote
	return &p
}

func (o *Overlay) addLink(l config.Link) {
	l.Source = config.Position{File: config.RuntimeFile}
	o.DeletedLinks = slices.DeleteFunc(o.DeletedLinks, func(n string) bool { return n == l.Name })
	o.Links = slices.DeleteFunc(o.Links, func(old config.Link) bool { return old.Name == l.Name })
	o.Links = append(o.Links, l)
}

func (o *Overlay) deleteLink(name string) {
	o.Links = slices.DeleteFunc(o.Links, func(old config.Link) bool { return old.Name == name })
	if !slices.Contains(o.DeletedLinks, name) {
		o.DeletedLinks = append(o.DeletedLinks, name)
	}
}

// forgetLink drops every runtime statement about a link, used when the link
// is persisted (added or removed) so the files decide again.
func (o *Overlay) forgetLink(name string) {
	o.Links = slices.DeleteFunc(o.Links, func(old config.Link) bool { return old.Name == name })
	o.DeletedLinks = slices.DeleteFunc(o.DeletedLinks, func(n string) bool { return n == name })
}

// runtime is the Service's policy bookkeeping: the last good policy from
// the files and the overlay on top of it.
type runtime struct {
	// mutation serialises the mutating operations: each one validates,
	// changes, reconciles and may roll back as one step.
	mutation mutationLock

	mu      sync.Mutex
	base    *config.Policy
	overlay Overlay

	// inForce is the one policy in force (files plus overlay), which every
	// pass takes; readable without any lock, so a reload never waits for a
	// pass stuck in modprobe and OnChange listeners may read it.
	inForce atomic.Pointer[config.Policy]
}

// PolicyInForce is the policy passes use (files plus overlay). It never
// blocks.
func (s *Service) PolicyInForce() *config.Policy { return s.runtime.inForce.Load() }

// setPolicy installs a freshly loaded policy with the overlay on top and
// reports whether it differs from the files' policy in force before.
func (s *Service) setPolicy(pol *config.Policy) bool {
	s.runtime.mu.Lock()
	defer s.runtime.mu.Unlock()
	changed := s.runtime.base == nil || !samePolicy(s.runtime.base, pol)
	s.runtime.base = pol
	s.runtime.inForce.Store(s.runtime.overlay.Apply(pol))
	return changed
}

// changeOverlay edits the overlay and puts the result in force. It returns
// the previous overlay so a refused change can be undone. The config-change
// listeners run afterwards, so the bus publishes the new declarations even
// when no pass follows (or the pass changes nothing).
func (s *Service) changeOverlay(edit func(*Overlay)) (previous Overlay) {
	s.runtime.mu.Lock()
	previous = s.runtime.overlay.clone()
	next := s.runtime.overlay.clone()
	edit(&next)
	s.runtime.overlay = next
	s.runtime.inForce.Store(next.Apply(s.runtime.base))
	s.runtime.mu.Unlock()
	s.configChanged()
	return previous
}

// BetweenCalls runs fn while no mutating call (SetRoCE, SetQoS,
// SetQoSSettings, AddLink, DeleteLink, SetNetnsMode, ReloadNow) is between
// its change and its outcome: what fn reads of the declarations and the
// state then holds, and is never a change a refused call is about to
// withdraw. The bus reads what it publishes under it. fn must not call a
// mutating method.
func (s *Service) BetweenCalls(fn func()) {
	s.runtime.mutation.mu.Lock()
	defer s.runtime.mutation.mu.Unlock()
	fn()
}

// PolicyStatus is which policy is in force and how it stands: what the
// service publishes at the end of each mutating call (AfterEachCall), and
// what PolicyStatus reads between calls.
type PolicyStatus struct {
	Policy      *config.Policy // PolicyInForce
	ConfigError error          // ConfigError
	InForce     config.InForce // InForce
}

// PolicyStatus reads the policy in force and how it stands, together.
func (s *Service) PolicyStatus() PolicyStatus {
	return PolicyStatus{Policy: s.PolicyInForce(), ConfigError: s.ConfigError(), InForce: s.InForce()}
}

// AfterEachCall adds fn to the listeners of every mutating call's end:
// once the call's outcome is known and before the next call starts (what
// BetweenCalls guarantees), the service publishes to each, in the order
// they were added, the PolicyStatus that then holds. The bus serves a
// call's outcome there, so the call's reply follows it without waiting
// behind the calls queued after it. fn is given what it needs and must
// not call the service: it runs while the service holds the call's lock.
func (s *Service) AfterEachCall(fn func(PolicyStatus)) {
	m := &s.runtime.mutation
	m.listenMu.Lock()
	m.listeners = append(m.listeners, fn)
	m.listenMu.Unlock()
}

// mutationLock serialises the mutating calls and, before each one lets
// the next in, publishes what holds to the AfterEachCall listeners.
type mutationLock struct {
	mu        sync.Mutex
	listenMu  sync.Mutex
	listeners []func(PolicyStatus)
	status    func() PolicyStatus // Service.PolicyStatus
}

func (m *mutationLock) Lock() { m.mu.Lock() }

func (m *mutationLock) Unlock() {
	m.listenMu.Lock()
	fns := m.listeners
	m.listenMu.Unlock()
	if len(fns) > 0 {
		st := m.status()
		for _, fn := range fns {
			fn(st)
		}
	}
	m.mu.Unlock()
}

// Declared returns the policy in force and a copy of the runtime overlay
// it includes, taken together: read one after the other, a runtime change
// landing in between gives a policy and an overlay that disagree.
func (s *Service) Declared() (*config.Policy, Overlay) {
	s.runtime.mu.Lock()
	defer s.runtime.mu.Unlock()
	return s.runtime.inForce.Load(), s.runtime.overlay.clone()
}

// RuntimeOverlay returns a copy of the runtime changes in force.
func (s *Service) RuntimeOverlay() Overlay {
	s.runtime.mu.Lock()
	defer s.runtime.mu.Unlock()
	return s.runtime.overlay.clone()
}
