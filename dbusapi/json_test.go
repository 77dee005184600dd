package dbusapi

import (
	"encoding/json"
	"strings"
	"testing"
)

// Every list of the model is [] in JSON when empty, never null: in the
// Describe document and in what rdmactl prints of devices and ports.
func TestModelListsAreNeverNull(t *testing.T) {
	d := Description{Devices: []Device{{Name: "mlx5_0", Ports: []Port{{Device: "mlx5_0", Number: 1}}}}, Runtime: &RuntimeState{}}
	for name, v := range map[string]any{"description": d, "empty description": Description{}, "device": Device{}, "port": Port{},
		"devices": []Device{{}}, "runtime": RuntimeState{}} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "null") {
			t.Errorf("%s: %s", name, b)
		}
	}
	// The embedded Manager's fields stay at the top level of Describe.
	b, _ := json.Marshal(Description{Manager: Manager{Version: "1"}})
	var top map[string]any
	if err := json.Unmarshal(b, &top); err != nil || top["version"] != "1" || top["config_files"] == nil {
		t.Errorf("Description: %s", b)
	}
	if d.Devices[0].Transports != nil || d.Devices[0].Ports[0].GIDTypes != nil {
		t.Error("marshalling changed the value marshalled")
	}
}
