package bustest

import (
	"os/exec"
	"strings"
	"testing"
)

// Each broker starts with the private configuration and serves a client.
func TestBrokersServe(t *testing.T) {
	for _, b := range Brokers {
		t.Run(b.Name, func(t *testing.T) {
			addr := b.Start(t)
			out, err := exec.Command("busctl", "--address="+addr, "--no-pager", "list").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "org.freedesktop.DBus") {
				t.Fatalf("busctl list: %v\n%s", err, out)
			}
		})
	}
}
