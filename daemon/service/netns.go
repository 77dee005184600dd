package service

import (
	"context"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// SetNetnsMode declares the RDMA network namespace mode. Without persist
// the running kernel is switched and the next boot is not affected; with
// persist, modprobe.d gives ib_core the mode at every boot too.
func (s *Service) SetNetnsMode(ctx context.Context, mode config.NetnsMode, persist bool) error {
	s.runtime.mutation.Lock()
	defer s.runtime.mutation.Unlock()
	if err := s.checkNetnsMode(mode); err != nil {
		return err
	}
	return s.commit(ctx, persist, change{
		runtime: func(o *Overlay) { o.Netns = mode },
		persist: func(p *config.Persisted) { p.Netns = mode },
		forget:  func(o *Overlay) { o.Netns = config.NetnsUnmanaged },
		// The mode's records: the running kernel's, and with persist the
		// one ib_core gets at boot. A persisted mode the running kernel
		// refuses to take now (other network namespaces exist) holds
		// for the next boot: the netns part records it deferred, and the
		// call says the switch waits (a NextBootError).
		call:      reconcile.Call{Subjects: []reconcile.Subject{reconcile.HostSubject()}, Keys: []config.Key{config.KeyNetnsMode}},
		anySource: !persist,
	})
}
