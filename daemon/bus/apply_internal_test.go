package bus

import (
	"context"
	"errors"
	"testing"
)

// Flush returns as soon as everything marked before it is served, without
// waiting for a later apply; what is marked and not yet served, it waits
// for until its context ends.
func TestFlushWaitsOnlyForWhatIsNotServed(t *testing.T) {
	s := &Server{applied: make(chan struct{}), stop: make(chan struct{})}
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	s.markGen, s.appliedGen = 2, 2
	if err := s.Flush(ended); err != nil {
		t.Errorf("Flush with every mark served = %v, want nil at once", err)
	}
	s.markGen = 3
	if err := s.Flush(ended); !errors.Is(err, context.Canceled) {
		t.Errorf("Flush with mark 3 not served = %v, want the context's end", err)
	}
}
