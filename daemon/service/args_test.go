package service_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/service"
)

// A device or port argument no device can have is refused as an invalid
// argument saying what is wrong with it (not merely that no device has
// that name or port): an empty name, a name longer than the kernel
// allows, a negative port.
func TestImpossibleDeviceArgumentsSayWhatIsWrong(t *testing.T) {
	e := newEnv(t, "", nil)
	long := strings.Repeat("m", 64)
	for _, tc := range []struct {
		c        service.RoCEChange
		arg, msg string
	}{
		{service.RoCEChange{Device: "", TOS: 5}, "device", "empty device name"},
		{service.RoCEChange{Device: long, TOS: 5}, "device", `"` + long + `" is 64 bytes long; RDMA device names have at most 63`},
		{service.RoCEChange{Device: "mlx5_0", Port: -1, TOS: 5}, "port", "-1 is not a port number"},
	} {
		err := e.svc.CheckSetRoCE(tc.c)
		var ae *service.ArgError
		if !errors.As(err, &ae) || ae.Arg != tc.arg || ae.Msg != tc.msg {
			t.Errorf("CheckSetRoCE(%.20q port %d): %v, want invalid argument %s: %s", tc.c.Device, tc.c.Port, err, tc.arg, tc.msg)
		}
	}
}
