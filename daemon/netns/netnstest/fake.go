// Package netnstest is a test double of the kernel's RDMA netns mode
// (netns.Kernel). Only tests import it; netns.RDMANetlink is the real
// counterpart, exercised in the VM test.
package netnstest

import (
	"sync"

	"github.com/rdmad/rdmad/daemon/config"
)

// Kernel holds a mode; SetErr, when set, makes every switch fail.
type Kernel struct {
	mu     sync.Mutex
	mode   config.NetnsMode
	SetErr error
}

// New returns a kernel in mode m.
func New(m config.NetnsMode) *Kernel { return &Kernel{mode: m} }

// Mode implements netns.Kernel.
func (k *Kernel) Mode() (config.NetnsMode, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.mode, nil
}

// SetMode implements netns.Kernel.
func (k *Kernel) SetMode(m config.NetnsMode) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.SetErr != nil {
		return k.SetErr
	}
	k.mode = m
	return nil
}

// Refuse makes every later switch fail with err (nil: accept again).
func (k *Kernel) Refuse(err error) {
	k.mu.Lock()
	k.SetErr = err
	k.mu.Unlock()
}
