package hosttest_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// TestSynthPortsHaveTheWatchedCounters: every counter doctor watches is a
// file of each generated port, so what the health monitor costs on a real
// mlx5 port is what the benchmarks measure.
func TestSynthPortsHaveTheWatchedCounters(t *testing.T) {
	root := hosttest.SynthRoot(t, 2)
	for dev := 0; dev < 2; dev++ {
		for port := 1; port <= 2; port++ {
			for _, c := range config.Counters {
				sub := "counters"
				if c.HW {
					sub = "hw_counters"
				}
				p := filepath.Join(root, fmt.Sprintf("sys/class/infiniband/mlx5_%d/ports/%d/%s/%s", dev, port, sub, c.Name))
				if b, err := os.ReadFile(p); err != nil || string(b) != "0\n" {
					t.Errorf("%s: %q, %v", p, b, err)
				}
			}
		}
	}
}
