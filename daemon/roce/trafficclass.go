package roce

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/config/value"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// TrafficClass is the global traffic class of a port in MLNX_OFED and
// DOCA-OFED drivers (infiniband/<dev>/tc/<port>/traffic_class), which
// [[roce]] traffic_class = true keeps at the port's TOS: the class of the
// QPs that do not use RDMA-CM, which default_roce_tos does not reach.
var TrafficClass = reconcile.NewSetting[TrafficClassValue](reconcile.Setting{
	Name: "roce_traffic_class", Kind: "roce traffic class", Key: config.KeyRoCETrafficClass, Title: "global traffic class",
	Tools: []string{"cma_roce_tos", "mlnx_qos"},
	// The class rdmad writes is a TOS (traffic_class = true keeps the tos).
	Valid: reconcile.ValueRule(func(v TrafficClassValue) error { return value.TOS(int(v.Value)) }),
})

// TrafficClassValue is a port's global traffic class: unset, or a class.
type TrafficClassValue struct {
	Set   bool
	Value uint8
}

func (v TrafficClassValue) String() string {
	if !v.Set {
		return "unset"
	}
	return strconv.Itoa(int(v.Value))
}

// trafficClassPath is the traffic_class file of an RDMA port.
func trafficClassPath(dev string, port int) string {
	return path.Join(host.ClassInfiniband, dev, "tc", strconv.Itoa(port), "traffic_class")
}

// parseTrafficClass parses the file as the driver prints it: an optional
// "Global tclass=N" line (only while a global class is set), then one line
// per address rule ("dst_ip=.../24,tclass=N"), which are not the global
// class and are left aside.
func parseTrafficClass(s string) (TrafficClassValue, error) {
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, "Global tclass=")
		if !ok {
			continue
		}
		v, err := strconv.Atoi(rest)
		if err != nil || value.TOS(v) != nil {
			return TrafficClassValue{}, fmt.Errorf("%s is not a traffic class %s", value.Quote(line), value.TOSRange)
		}
		return TrafficClassValue{Set: true, Value: uint8(v)}, nil
	}
	return TrafficClassValue{}, nil
}

// readTrafficClass reads the global traffic class of an RDMA port;
// present is false when the port has no such file (an upstream driver).
func (p *Part) readTrafficClass(dev string, port int) (v TrafficClassValue, present bool, err error) {
	rel := trafficClassPath(dev, port)
	s, err := p.Host.ReadString(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return TrafficClassValue{}, false, nil
	}
	if err != nil {
		return TrafficClassValue{}, false, err
	}
	v, err = parseTrafficClass(s)
	if err != nil {
		return TrafficClassValue{}, false, fmt.Errorf("%s: %w", rel, err)
	}
	return v, true, nil
}

// writeTrafficClass sets the global traffic class of an RDMA port, or
// unsets it (v.Set false): the driver takes "-1" for no global class
// (traffic_class_store keeps -1, the value it starts with, and prints
// nothing for it).
func (p *Part) writeTrafficClass(dev string, port int, v TrafficClassValue) error {
	s := "-1"
	if v.Set {
		s = strconv.Itoa(int(v.Value))
	}
	return p.Host.WriteString(trafficClassPath(dev, port), s)
}

// applyTrafficClass keeps the port's global traffic class at its TOS
// where traffic_class = true, and records the kernel's value of the
// others when the daemon publishes them. The file is OFED's: on an
// upstream driver the setting does not apply.
func (p *Part) applyTrafficClass(run *reconcile.DeviceRun, dev string, port int, subject reconcile.Subject, want config.RoCEDesired) {
	if !want.TrafficClass.Set || !want.TrafficClass.Value {
		if run.Publish {
			if v, present, err := p.readTrafficClass(dev, port); present || err != nil {
				run.Record(TrafficClass.Observe(subject, v, err))
			}
		}
		return
	}
	src := want.TrafficClass.Source
	if want.TOS == nil {
		run.Add(TrafficClass.NotApplicable(subject, TrafficClassValue{}, src,
			fmt.Errorf("traffic_class = true writes the port's tos, and no [[roce]] rule declares a tos for %s", subject)))
		return
	}
	w := TrafficClassValue{Set: true, Value: uint8(*want.TOS)}
	if _, present, err := p.readTrafficClass(dev, port); err == nil && !present {
		run.Add(TrafficClass.NotApplicable(subject, w, src,
			fmt.Errorf("%s has no global traffic class (/%s): MLNX_OFED and DOCA-OFED drivers add it, upstream ones do not (default_roce_tos covers RDMA-CM connections only there)", subject, trafficClassPath(dev, port))))
		return
	}
	run.Add(TrafficClass.Converge(run, reconcile.Target[TrafficClassValue]{
		Subject: subject, Want: w, Source: src, Watch: []string{path.Dir(trafficClassPath(dev, port))},
		Read: func() (TrafficClassValue, error) {
			v, _, err := p.readTrafficClass(dev, port)
			return v, err
		},
		Write: func(v TrafficClassValue) error {
			return p.writeTrafficClass(dev, port, v)
		},
	}))
}

// undoTrafficClass puts a port's global traffic class back (unset: -1).
func (p *Part) undoTrafficClass(a reconcile.Action) error {
	old, ok := TrafficClass.Old(a)
	if !ok {
		return fmt.Errorf("the previous global traffic class of %s is not known", a.Subject)
	}
	return p.writeTrafficClass(a.Subject.Device, a.Subject.Port, old)
}
