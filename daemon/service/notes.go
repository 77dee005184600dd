package service

import (
	"context"
	"reflect"
	"time"

	"github.com/rdmad/rdmad/daemon/audit"
	"github.com/rdmad/rdmad/daemon/config"
)

// noteOf is the note of the entries a call changes: who the call's
// context names (the bus's caller) and now. Empty when it names nobody.
func (s *Service) noteOf(ctx context.Context) config.Note {
	c, ok := audit.From(ctx)
	if !ok {
		return config.Note{}
	}
	return config.Note{By: c.Who(), At: s.now().UTC().Truncate(time.Second)}
}

// notePersisted gives n to every entry of next that old does not hold as
// it is (new, or changed by the call); the others keep theirs.
func notePersisted(old config.Persisted, next *config.Persisted, n config.Note) {
	if next.Netns == config.NetnsUnmanaged {
		next.NetnsNote = config.Note{}
	}
	if n.Empty() {
		return
	}
	noteRules(old.RoCE, old.QoS, old.Links, next.RoCE, next.QoS, next.Links, n)
	if next.Netns != config.NetnsUnmanaged && next.Netns != old.Netns {
		next.NetnsNote = n
	}
}

// noteOverlay is notePersisted for the runtime overlay.
func noteOverlay(old Overlay, next *Overlay, n config.Note) {
	if next.Netns == config.NetnsUnmanaged {
		next.NetnsNote = config.Note{}
	}
	if n.Empty() {
		return
	}
	noteRules(old.RoCE, old.QoS, old.Links, next.RoCE, next.QoS, next.Links, n)
	if next.Netns != config.NetnsUnmanaged && next.Netns != old.Netns {
		next.NetnsNote = n
	}
}

func noteRules(oldRoCE []config.RoCERule, oldQoS []config.QoSRule, oldLinks []config.Link, roce []config.RoCERule, qos []config.QoSRule, links []config.Link, n config.Note) {
	noteNew(oldRoCE, roce, n, func(r *config.RoCERule) (*config.Note, *config.Position) { return &r.Note, &r.Source })
	noteNew(oldQoS, qos, n, func(r *config.QoSRule) (*config.Note, *config.Position) { return &r.Note, &r.Source })
	noteNew(oldLinks, links, n, func(l *config.Link) (*config.Note, *config.Position) { return &l.Note, &l.Source })
}

// noteNew gives n to each entry of next that no entry of old equals, who
// and where aside (fields says which fields of E hold them).
func noteNew[E any](old, next []E, n config.Note, fields func(*E) (*config.Note, *config.Position)) {
	bare := func(e E) E {
		note, src := fields(&e)
		*note, *src = config.Note{}, config.Position{}
		return e
	}
	olds := make([]E, len(old))
	for i := range old {
		olds[i] = bare(old[i])
	}
	for i := range next {
		b := bare(next[i])
		kept := false
		for _, o := range olds {
			if reflect.DeepEqual(o, b) {
				kept = true
				break
			}
		}
		if !kept {
			note, _ := fields(&next[i])
			*note = n
		}
	}
}
