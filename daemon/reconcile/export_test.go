package reconcile

import "time"

// EndFailureWindowsForTest makes the failure windows end only when the
// returned func is called (then every window open ends).
func (r *Reconciler) EndFailureWindowsForTest() (end func()) {
	var ends []func()
	r.failures.mu.Lock()
	r.failures.after = func(_ time.Duration, fn func()) { ends = append(ends, fn) }
	r.failures.mu.Unlock()
	return func() {
		r.failures.mu.Lock()
		e := ends
		ends = nil
		r.failures.mu.Unlock()
		for _, fn := range e {
			fn()
		}
	}
}
