package roce

import (
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// OFED's traffic_class file as the driver prints it: present or not
// (upstream), unset, a global class with or without address rules.
func TestTrafficClassFile(t *testing.T) {
	if _, present, err := (&Part{Host: host.New(hosttest.FixtureDir("mlx5"))}).readTrafficClass("mlx5_0", 1); err != nil || present {
		t.Errorf("upstream traffic class: present %v, %v", present, err)
	}
	root := hosttest.Copy(t, "mlx5-ofed")
	p := &Part{Host: host.New(root)}
	if v, present, err := p.readTrafficClass("mlx5_0", 1); err != nil || !present || v.Set || v.String() != "unset" {
		t.Errorf("fixture traffic class %+v present %v, %v: want present and unset", v, present, err)
	}
	tcFile := trafficClassPath("mlx5_1", 1)
	for _, c := range []struct {
		content string
		want    TrafficClassValue
		bad     bool
	}{
		{"", TrafficClassValue{}, false},
		{"Global tclass=106\n", TrafficClassValue{Set: true, Value: 106}, false},
		// Address rules are printed after the global class, and alone.
		{"Global tclass=0\ndst_ip=10.0.0.0/8,tclass=96\n", TrafficClassValue{Set: true}, false},
		{"dst_ip=10.0.0.0/8,tclass=96\n", TrafficClassValue{}, false},
		{"Global tclass=300\n", TrafficClassValue{}, true},
		{"Global tclass=x\n", TrafficClassValue{}, true},
	} {
		hosttest.Write(t, root, tcFile, c.content)
		got, present, err := p.readTrafficClass("mlx5_1", 1)
		if (err != nil) != c.bad || (!c.bad && (got != c.want || !present)) {
			t.Errorf("%q: %+v %v %v", c.content, got, present, err)
		}
		if c.bad && !strings.Contains(err.Error(), "traffic_class") {
			t.Errorf("%q: error %v does not name the file", c.content, err)
		}
	}

	if err := p.writeTrafficClass("mlx5_0", 1, TrafficClassValue{Set: true, Value: 106}); err != nil {
		t.Fatal(err)
	}
	// The fixture is a plain file: what the driver then prints is put there
	// by hand (it keeps the number and prints it as "Global tclass=N").
	if got := hosttest.Read(t, root, trafficClassPath("mlx5_0", 1)); got != "106" {
		t.Errorf("wrote %q", got)
	}
	if err := p.writeTrafficClass("mlx5_0", 1, TrafficClassValue{}); err != nil {
		t.Fatal(err)
	}
	if got := hosttest.Read(t, root, trafficClassPath("mlx5_0", 1)); got != "-1" {
		t.Errorf("unset wrote %q, want -1 (the driver's value for no global class)", got)
	}
}
