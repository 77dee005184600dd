package perf

import (
	"testing"
	"time"
)

// A boot storm: 64 devices arriving within 200 ms are each configured once
// or twice, never once per arrival of the others. (How fast it converges is
// a measurement of make bench, not a test.)
func TestBootStormConfiguresEachDeviceOnceOrTwice(t *testing.T) {
	h, err := NewHost(64)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Remove()
	res, err := Storm(h, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if res.Configured != 64 || res.MaxPerDev > 2 || res.MaxPerDev < 1 {
		t.Errorf("storm: %+v; want all 64 configured, each by one or two passes", res)
	}
	if err := h.Verify(); err != nil {
		t.Error(err)
	}
	t.Logf("%d passes for 64 arrivals", res.Passes)
}
