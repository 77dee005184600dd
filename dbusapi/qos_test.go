package dbusapi

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// QoSPFC is "ay" on the bus and an array of numbers in JSON, and survives
// both round trips.
func TestPrioritiesOnTheBusAndInJSON(t *testing.T) {
	in := Port{QoSTrust: "dscp", QoSPFC: Priorities{3, 4}, DesiredQoSPFC: Priorities{}, DesiredQoSPFCSet: true}
	props := ToProps(in)
	if sig := props["QoSPFC"].Signature().String(); sig != "ay" {
		t.Errorf("QoSPFC signature %s", sig)
	}
	var out Port
	if err := FromProps(props, &out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out.QoSPFC, in.QoSPFC) || out.QoSTrust != "dscp" || !out.DesiredQoSPFCSet {
		t.Errorf("bus round trip: %+v", out)
	}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"qos_pfc":[3,4]`) || !strings.Contains(string(b), `"desired_qos_pfc":[]`) {
		t.Errorf("JSON %s", b)
	}
	var back Port
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back.QoSPFC, in.QoSPFC) {
		t.Errorf("JSON round trip: %+v %v", back.QoSPFC, err)
	}
}
