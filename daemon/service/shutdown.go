package service

import (
	"errors"
	"time"
)

// ErrStopping refuses a change that arrives while rdmad stops.
var ErrStopping = errors.New("rdmad is stopping; the change was not made")

// DefaultShutdownGrace bounds how long Shutdown waits for the change under
// way.
const DefaultShutdownGrace = 5 * time.Second

// Shutdown stops taking changes and waits, at most grace, for the one in
// progress (changes run one at a time) to finish, so that a stop never
// cuts a persisted write between its temporary file and its rename. It
// reports whether the change in progress finished in time; a later change
// is refused with ErrStopping before it touches anything.
func (s *Service) Shutdown(grace time.Duration) bool {
	s.stopping.Store(true)
	got := make(chan struct{})
	go func() {
		// Every change holds the mutation lock from before its first
		// write to after its last; once it is ours, none is under way and
		// any later one sees stopping.
		s.runtime.mutation.Lock()
		close(got)
		s.runtime.mutation.Unlock()
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-got:
		return true
	case <-t.C:
		s.log.Warn("a change under way did not finish in time; stopping anyway", "waited", grace)
		return false
	}
}
