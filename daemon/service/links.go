package service

import (
	"context"
	"fmt"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// AddLink declares a soft RDMA link (rxe or siw on a netdev). The links part
// of the reconciler creates it in the pass that follows.
func (s *Service) AddLink(ctx context.Context, l config.Link, persist bool) error {
	s.runtime.mutation.Lock()
	defer s.runtime.mutation.Unlock()
	if err := s.checkAddLink(l, persist); err != nil {
		return err
	}
	return s.commit(ctx, persist, change{
		runtime: func(o *Overlay) { o.addLink(l) },
		persist: func(p *config.Persisted) { p.AddLink(l) },
		forget:  func(o *Overlay) { o.forgetLink(l.Name) },
		call:    reconcile.Call{Subjects: []reconcile.Subject{reconcile.LinkSubject(l.Name)}, Keys: []config.Key{config.KeyLink}},
	})
}

// DeleteLink stops declaring a link and deletes it from the kernel. With
// persist, a link an administrator's file declares is refused before
// anything is touched, also when rdmad's drop-in or the overlay shadows
// that declaration: it would come back with the next pass.
func (s *Service) DeleteLink(ctx context.Context, name string, persist bool) error {
	s.runtime.mutation.Lock()
	defer s.runtime.mutation.Unlock()
	if err := s.checkDeleteLink(name, persist); err != nil {
		return err
	}
	exists := s.host.Exists(host.ClassInfiniband + "/" + name)
	if exists && s.parts.Links == nil {
		return fmt.Errorf("delete link %s: this rdmad has no RDMA netlink link support", name)
	}
	return s.commit(ctx, persist, change{
		runtime: func(o *Overlay) { o.deleteLink(name) },
		persist: func(p *config.Persisted) { p.RemoveLink(name) },
		forget:  func(o *Overlay) { o.forgetLink(name) },
		kernel: func(ctx context.Context) []reconcile.Action {
			if !exists {
				return nil
			}
			return []reconcile.Action{s.parts.Links.Delete(ctx, name)}
		},
		scope: reconcile.Scope{Devices: map[string][]int{name: nil}},
		call: reconcile.Call{Subjects: []reconcile.Subject{reconcile.LinkSubject(name)}, Keys: []config.Key{config.KeyLink},
			Removes: true},
	})
}
