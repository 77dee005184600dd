package service

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/config/value"
	"github.com/rdmad/rdmad/daemon/host"
)

// deviceArg is the device a call names: the argument checks every
// per-port call shares (SetRoCE, SetQoS, SetQoSSettings), then the device
// as last read.
func (s *Service) deviceArg(name string) (host.Device, error) {
	if name == "" {
		return host.Device{}, &ArgError{"device", "empty device name"}
	}
	if len(name) > host.MaxDeviceNameLen {
		return host.Device{}, &ArgError{"device", fmt.Sprintf("%s is %d bytes long; RDMA device names have at most %d", argName(name), len(name), host.MaxDeviceNameLen)}
	}
	return s.device(name)
}

// portsArg is the ports of dev a call's port argument names: every port
// for 0, else that one (NoSuchPort when dev has none of that number).
func portsArg(dev host.Device, port int) ([]int, error) {
	if port < 0 {
		return nil, &ArgError{"port", fmt.Sprintf("%d is not a port number", port)}
	}
	var ports []int
	for _, p := range dev.Ports {
		if port == 0 || p.Number == port {
			ports = append(ports, p.Number)
		}
	}
	if len(ports) == 0 {
		return nil, &NotFoundError{MissingPort, "port", fmt.Sprintf("%s has no port %d (ports: %s)", dev.Name, port, portList(dev))}
	}
	return ports, nil
}

func (s *Service) validateRoCE(c RoCEChange) (host.Device, []int, error) {
	dev, err := s.deviceArg(c.Device)
	if err != nil {
		return host.Device{}, nil, err
	}
	var tos *int
	if c.TOS != -1 {
		tos = &c.TOS
	}
	rule := config.RoCERule{Selector: config.Selector{Device: config.Exact(dev.Name)}, Mode: c.Mode, TOS: tos}
	if err := argProblems(rule.Validate(), "mode"); err != nil {
		return dev, nil, err
	}
	ports, err := portsArg(dev, c.Port)
	if err != nil {
		return dev, nil, err
	}
	for _, n := range ports {
		p := dev.Port(n)
		if t := dev.PortTransport(p); t != host.TransportRoCE {
			if c.Port == 0 && len(ports) > 1 {
				continue // mixed VPI device: the RoCE part skips non-Ethernet ports
			}
			return dev, nil, &ArgError{"port", fmt.Sprintf("%s port %d is %s, not RoCE: mode and TOS apply to Ethernet ports", dev.Name, n, t)}
		}
	}
	if !hasRoCEPort(dev, ports) {
		return dev, nil, &ArgError{"device", fmt.Sprintf("%s has no RoCE (Ethernet) port", dev.Name)}
	}
	return dev, ports, nil
}

func hasRoCEPort(dev host.Device, ports []int) bool {
	for _, n := range ports {
		if dev.PortTransport(dev.Port(n)) == host.TransportRoCE {
			return true
		}
	}
	return false
}

func portList(dev host.Device) string {
	var s []string
	for _, p := range dev.Ports {
		s = append(s, fmt.Sprint(p.Number))
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// argName quotes a name taken from a D-Bus argument for its error message,
// as the caller spelled it: the bus escapes the whole message once
// (dbusapi.Escape), so a byte quoted here too would come back as "\\xff"
// and could not be pasted back. Cut after 64 bytes, as config.QuoteName.
func argName(s string) string {
	const keep = 64
	if len(s) <= keep {
		return `"` + s + `"`
	}
	return `"` + s[:keep] + `"...`
}

// storable refuses, for a persisted change, a name the drop-in cannot hold:
// TOML is UTF-8 only, and a name with another byte (which the kernel
// allows, and D-Bus clients send escaped) would come back as another name.
func storable(persist bool, arg, name string) error {
	if persist && !utf8.ValidString(name) {
		return &ArgError{arg, fmt.Sprintf("%s is not UTF-8: it cannot be stored in the TOML drop-in; set it without persist", argName(name))}
	}
	return nil
}

// validLinkName applies the config file's rules for link names, so a name
// D-Bus accepts is one the persisted drop-in can hold.
func validLinkName(name string) error {
	if err := value.LinkName(name); err != nil {
		return &ArgError{"name", err.Error()}
	}
	return nil
}

// argProblems is the first problem a rule's Validate found as an
// *ArgError for the argument of its key (whole, for a problem of the rule
// as a whole: what the call sets nothing of), or nil.
func argProblems(ps []config.Problem, whole string) error {
	if len(ps) == 0 {
		return nil
	}
	arg := ps[0].Key
	if arg == "" {
		arg = whole
	}
	return &ArgError{arg, ps[0].Err.Error()}
}

// device returns a device as last observed, or as read now when no pass
// has seen it yet (its uevent is still queued).
func (s *Service) device(name string) (host.Device, error) {
	if d, ok := s.rec.Device(name); ok {
		return d, nil
	}
	d, err := s.host.ReadDevice(name, host.DetailPolicy)
	if errors.Is(err, host.ErrNoDevice) {
		if !host.ValidDeviceName(name) {
			return host.Device{}, &ArgError{"device", fmt.Sprintf("%s cannot be an RDMA device name", argName(name))}
		}
		return host.Device{}, &NotFoundError{MissingDevice, "device", fmt.Sprintf("no RDMA device %s", argName(name))}
	}
	if err != nil {
		return host.Device{}, fmt.Errorf("read device %s: %w", name, err)
	}
	return d, nil
}

// checkAddLink validates AddLink's arguments against the host and the
// policy in force.
func (s *Service) checkAddLink(l config.Link, persist bool) error {
	if err := argProblems(l.Validate(), "name"); err != nil {
		return err
	}
	if err := storable(persist, "name", l.Name); err != nil {
		return err
	}
	if err := storable(persist, "netdev", l.Netdev); err != nil {
		return err
	}
	if !s.host.NetdevExists(l.Netdev) {
		return &NotFoundError{MissingDevice, "netdev", fmt.Sprintf("no network interface %s", argName(l.Netdev))}
	}
	if s.parts.Links == nil {
		return fmt.Errorf("add link %s: this rdmad does not manage soft links", l.Name)
	}
	pol := s.PolicyInForce()
	for _, other := range pol.Links {
		if other.Name != l.Name && other.Type == l.Type && other.Netdev == l.Netdev {
			return &ArgError{"netdev", fmt.Sprintf("%s already has %s link %s (%s); the kernel allows one per netdev", l.Netdev, l.Type, argName(other.Name), other.Source)}
		}
	}
	if _, declared := pol.LinkSource(l.Name); !declared && s.host.Exists(host.ClassInfiniband+"/"+l.Name) {
		return &ArgError{"name", fmt.Sprintf("an RDMA device %s already exists and is not a link rdmad manages", argName(l.Name))}
	}
	return nil
}

// checkDeleteLink validates DeleteLink's arguments: a declared link, and
// with persist one no administrator's file declares.
func (s *Service) checkDeleteLink(name string, persist bool) error {
	if err := validLinkName(name); err != nil {
		return err
	}
	if _, declared := s.PolicyInForce().LinkSource(name); !declared {
		return &NotFoundError{MissingLink, "name", fmt.Sprintf("no link %s is declared", argName(name))}
	}
	if persist {
		admin, err := config.AdminLinkSources(s.files(), s.configFile, name)
		if err != nil {
			return &ConfigError{Err: err}
		}
		if len(admin) > 0 {
			where := make([]string, len(admin))
			for i, pos := range admin {
				where[i] = pos.String()
			}
			return &ArgError{"name", fmt.Sprintf("link %s is declared at %s, which rdmad does not edit: remove it there (without persist, the link is deleted until rdmad restarts)",
				argName(name), strings.Join(where, " and "))}
		}
	}
	return nil
}

// checkNetnsMode validates SetNetnsMode's mode.
func (s *Service) checkNetnsMode(mode config.NetnsMode) error {
	if err := mode.Validate(); err != nil {
		return &ArgError{"mode", err.Error()}
	}
	if s.parts.Netns == nil {
		return errors.New("set the netns mode: this rdmad does not manage the RDMA netns mode")
	}
	return nil
}

// The Check methods validate a mutating call's arguments as the call
// itself does first, without changing anything and without waiting for a
// call under way: the bus runs them before it asks anyone for
// authorization, so nobody is asked for a password for a call that would
// fail (as hostnamed does). The call validates again when it runs, since
// the host may change in between. Each returns an *ArgError, a
// *NotFoundError or a plain error saying what this rdmad cannot do.

// CheckSetRoCE validates a SetRoCE request.
func (s *Service) CheckSetRoCE(c RoCEChange) error {
	dev, _, err := s.validateRoCE(c)
	if err != nil {
		return err
	}
	return storable(c.Persist, "device", dev.Name)
}

// CheckSetQoS validates a SetQoS request.
func (s *Service) CheckSetQoS(c QoSChange) error {
	dev, _, err := s.validateQoS(c)
	if err != nil {
		return err
	}
	return storable(c.Persist, "device", dev.Name)
}

// CheckSetQoSSettings validates a SetQoSSettings request.
func (s *Service) CheckSetQoSSettings(c QoSSettingsChange) error {
	_, _, err := s.validateQoSSettings(c)
	return err
}

// CheckAddLink validates an AddLink request.
func (s *Service) CheckAddLink(l config.Link, persist bool) error { return s.checkAddLink(l, persist) }

// CheckDeleteLink validates a DeleteLink request.
func (s *Service) CheckDeleteLink(name string, persist bool) error {
	return s.checkDeleteLink(name, persist)
}

// CheckSetNetnsMode validates a SetNetnsMode request.
func (s *Service) CheckSetNetnsMode(mode config.NetnsMode, _ bool) error {
	return s.checkNetnsMode(mode)
}

// CheckAPI says whether [api] changes allows a declaration over D-Bus,
// persisted or not: nil, or a *config.NotAllowedError naming where the
// files forbid it.
func (s *Service) CheckAPI(persist bool) error { return s.PolicyInForce().API.Allows(persist) }
