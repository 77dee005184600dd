package service

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rdmad/rdmad/daemon/audit"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// HoldRequest is a HoldCorrections call: its caller asks rdmad not to
// write some settings of one port until it releases them or leaves the
// bus (the bus keeps that lease; rdmad's holds are in memory only).
type HoldRequest struct {
	Device   string
	Port     int
	Settings []string // the settings' names, as Port.Settings names them
	// Holder names the caller in logs, doctor and status; one holder has
	// at most one hold on a port (a second call replaces its settings).
	Holder string
}

// MaxHoldSettings bounds the settings one hold names: more than a port
// has.
const MaxHoldSettings = 64

// CheckHoldCorrections validates a hold's arguments against the host: an
// existing device and port (not 0: a hold is on one port) and settings
// that a part keeps on ports, each named once.
func (s *Service) CheckHoldCorrections(h HoldRequest) error {
	_, err := s.holdArgs(h)
	return err
}

func (s *Service) holdArgs(h HoldRequest) ([]*reconcile.Setting, error) {
	dev, err := s.deviceArg(h.Device)
	if err != nil {
		return nil, err
	}
	if h.Port == 0 {
		return nil, &ArgError{"port", "a hold is on one port: 0 (every port) is not one"}
	}
	if _, err := portsArg(dev, h.Port); err != nil {
		return nil, err
	}
	if len(h.Settings) == 0 {
		return nil, &ArgError{"settings", "names no setting"}
	}
	if len(h.Settings) > MaxHoldSettings {
		return nil, &ArgError{"settings", fmt.Sprintf("names %d settings; a hold names at most %d", len(h.Settings), MaxHoldSettings)}
	}
	out := make([]*reconcile.Setting, 0, len(h.Settings))
	for _, name := range h.Settings {
		st, ok := s.rec.PortSetting(name)
		if !ok {
			return nil, &ArgError{"settings", fmt.Sprintf("%s is not a setting rdmad keeps on a port (%s)", argName(name), strings.Join(s.rec.PortSettingNames(), ", "))}
		}
		if slices.Contains(out, st) {
			return nil, &ArgError{"settings", fmt.Sprintf("names %s twice", argName(name))}
		}
		out = append(out, st)
	}
	return out, nil
}

// HoldCorrections starts (or changes) the caller's hold on settings of a
// port: rdmad reads them and writes none of them until the hold ends. It
// is logged at notice priority with the holder, as is its end.
func (s *Service) HoldCorrections(h HoldRequest) error {
	settings, err := s.holdArgs(h)
	if err != nil {
		return err
	}
	subject := reconcile.PortSubject(h.Device, h.Port)
	if err := s.rec.HoldCorrections(reconcile.Hold{Subject: subject, Settings: settings, Holder: h.Holder, Since: time.Now()}); err != nil {
		return err
	}
	s.log.Log(context.Background(), audit.LevelNotice, "corrections held", "subject", subject.String(), "settings", strings.Join(h.Settings, ","), "holder", h.Holder)
	return nil
}

// ReleaseCorrections ends holder's hold on a port and reads the port's
// settings again, so what the holder left is corrected (or reported)
// under [drift] action. A caller without a hold on the port gets an
// ArgError.
func (s *Service) ReleaseCorrections(holder, device string, port int) error {
	subject := reconcile.PortSubject(device, port)
	if !s.rec.ReleaseCorrections(holder, subject) {
		return &ArgError{"device", fmt.Sprintf("the caller holds no corrections of %s/%d", argName(device), port)}
	}
	s.log.Log(context.Background(), audit.LevelNotice, "corrections released", "subject", subject.String(), "holder", holder)
	s.queue.Recheck([]string{device}, false)
	return nil
}

// ReleaseHolder ends every hold of holder, which left the bus, and reads
// those ports again.
func (s *Service) ReleaseHolder(holder string) {
	s.released(s.rec.ReleaseHolder(holder), "the holder left the bus", holder)
}

// ReleaseAllHolds ends every hold: rdmad lost its bus connection, and
// every holder with it.
func (s *Service) ReleaseAllHolds() {
	s.released(s.rec.ReleaseAll(), "rdmad's bus connection was lost", "")
}

func (s *Service) released(ports []reconcile.Subject, why, holder string) {
	if len(ports) == 0 {
		return
	}
	var devs []string
	for _, p := range ports {
		attrs := []any{"subject", p.String(), "why", why}
		if holder != "" {
			attrs = append(attrs, "holder", holder)
		}
		s.log.Log(context.Background(), audit.LevelNotice, "corrections released", attrs...)
		devs = append(devs, p.Device)
	}
	s.queue.Recheck(slices.Compact(devs), false)
}
