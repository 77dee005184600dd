package service

import (
	"context"

	"github.com/rdmad/rdmad/daemon/reconcile"
)

// ReadPorts reads the settings of device's ports (every device's when
// device is "") from the kernel now, under the policy in force: what
// rdmactl roce show and qos show print, as of the call rather than of
// rdmad's last read. It writes nothing and changes nothing published.
func (s *Service) ReadPorts(ctx context.Context, device string, port int) (reconcile.Live, error) {
	if err := s.CheckReadPorts(device, port); err != nil {
		return reconcile.Live{}, err
	}
	names := []string{device}
	if device == "" {
		names = s.rec.Summary().Devices
	}
	return s.rec.ReadLive(ctx, s.PolicyInForce(), names), nil
}

// CheckReadPorts validates ReadPorts' arguments: "" and port 0 for every
// port of every device, or a device rdmad knows and 0 or one of its
// ports.
func (s *Service) CheckReadPorts(device string, port int) error {
	if device == "" {
		if port != 0 {
			return &ArgError{"port", "a port number needs a device"}
		}
		return nil
	}
	dev, err := s.deviceArg(device)
	if err != nil {
		return err
	}
	_, err = portsArg(dev, port)
	return err
}
