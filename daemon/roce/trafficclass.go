package roce

import (
	"fmt"
	"path"
	"strconv"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// TrafficClass is the global traffic class of a port in MLNX_OFED and
// DOCA-OFED drivers (infiniband/<dev>/tc/<port>/traffic_class), which
// [[roce]] traffic_class = true keeps at the port's TOS: the class of the
// QPs that do not use RDMA-CM, which default_roce_tos does not reach.
var TrafficClass = reconcile.NewSetting[TrafficClassValue](reconcile.Setting{
	Name: "roce_traffic_class", Kind: "roce traffic class", Key: config.KeyRoCETrafficClass, Title: "global traffic class",
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

func (p *Part) readTrafficClass(dev string, port int) (TrafficClassValue, bool, error) {
	tc, err := p.Host.ReadTrafficClass(dev, port)
	if err != nil {
		return TrafficClassValue{}, false, err
	}
	return TrafficClassValue{Set: tc.Set, Value: tc.Value}, tc.Present, nil
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
			fmt.Errorf("%s has no global traffic class (/%s): MLNX_OFED and DOCA-OFED drivers add it, upstream ones do not (default_roce_tos covers RDMA-CM connections only there)", subject, host.TrafficClassPath(dev, port))))
		return
	}
	run.Add(TrafficClass.Converge(run, reconcile.Converge[TrafficClassValue]{
		Subject: subject, Want: w, Source: src, Watch: []string{path.Dir(host.TrafficClassPath(dev, port))},
		Read: func() (TrafficClassValue, error) {
			v, _, err := p.readTrafficClass(dev, port)
			return v, err
		},
		Write: func(v TrafficClassValue) error {
			return p.Host.WriteTrafficClass(dev, port, host.TrafficClass{Set: v.Set, Value: v.Value})
		},
	}))
}

// undoTrafficClass puts a port's global traffic class back (unset: -1).
func (p *Part) undoTrafficClass(a reconcile.Action) error {
	old, ok := TrafficClass.Old(a)
	if !ok {
		return fmt.Errorf("the previous global traffic class of %s is not known", a.Subject)
	}
	return p.Host.WriteTrafficClass(a.Subject.Device, a.Subject.Port, host.TrafficClass{Set: old.Set, Value: old.Value})
}
