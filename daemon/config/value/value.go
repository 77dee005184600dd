// Package value holds the rules of the values rdmad's policy takes, once:
// the configuration's decoder (daemon/config), the service's checks of
// D-Bus arguments and rdmactl's flags all call these, so a value one of
// them accepts is a value the others accept, and each refusal reads the
// same. Each function returns nil for a valid value, else an error that
// says what the value is and what the key takes; the caller names the key
// or argument (file:line, the D-Bus argument, the flag).
//
// The package imports nothing of rdmad (rdmactl links it).
package value

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Bounds of the numeric values.
const (
	MaxTOS      = 255 // the RDMA-CM type of service is a u8
	MaxPriority = 7   // 802.1p priorities are 0..7
	MaxDSCP     = 63  // DSCP is six bits
)

// The RoCE modes a [[roce]] rule and SetRoCE take; rdmad writes the
// kernel's strings (KernelRoCEv1, KernelRoCEv2) to configfs.
const (
	RoCEv1       = "v1"
	RoCEv2       = "v2"
	KernelRoCEv1 = "IB/RoCE v1"
	KernelRoCEv2 = "RoCE v2"
)

// RoCEMode accepts "v1" and "v2", and names the value to write for a
// kernel string written by mistake.
func RoCEMode(s string) error {
	switch s {
	case RoCEv1, RoCEv2:
		return nil
	case KernelRoCEv1, "RoCE v1":
		return fmt.Errorf("%s is the kernel's string: write %q (rdmad writes %q to configfs)", Quote(s), RoCEv1, KernelRoCEv1)
	case KernelRoCEv2:
		return fmt.Errorf("%s is the kernel's string: write %q (rdmad writes %q to configfs)", Quote(s), RoCEv2, KernelRoCEv2)
	}
	return fmt.Errorf("%s is not a RoCE mode: use %q (IB/RoCE v1) or %q (RoCE v2)", Quote(s), RoCEv1, RoCEv2)
}

// TOS accepts a type of service (TOSRange).
func TOS(n int) error { return TOSRange.Check(int64(n)) }

// Trust accepts the QoS trust modes (TrustModes: "dscp" and "pcp").
func Trust(s string) error {
	if slices.Contains(TrustModes, s) {
		return nil
	}
	return fmt.Errorf("%s is not a QoS trust mode: use %s", Quote(s), OneOf(TrustModes))
}

// Priorities accepts a list of distinct 802.1p priorities, such as
// the priorities with PFC on; an empty list is valid (PFC off).
func Priorities(ps []int) error {
	var seen uint8
	for _, p := range ps {
		if err := Priority(p); err != nil {
			return err
		}
		if seen&(1<<p) != 0 {
			return fmt.Errorf("priority %d is listed twice", p)
		}
		seen |= 1 << p
	}
	return nil
}

// Priority accepts one 802.1p priority (PriorityRange).
func Priority(p int) error {
	if err := PriorityRange.Check(int64(p)); err != nil {
		return fmt.Errorf("priority %w", err)
	}
	return nil
}

// DSCP accepts a DSCP value (DSCPRange).
func DSCP(d int) error {
	if err := DSCPRange.Check(int64(d)); err != nil {
		return fmt.Errorf("DSCP %w", err)
	}
	return nil
}

// LinkType accepts the soft RDMA link types "rxe" and "siw".
func LinkType(s string) error {
	if s == "rxe" || s == "siw" {
		return nil
	}
	return fmt.Errorf("%s is not a soft RDMA link type: use \"rxe\" (Soft-RoCE) or \"siw\" (Soft-iWARP)", Quote(s))
}

// NetnsMode accepts the RDMA netns modes "shared" and "exclusive".
func NetnsMode(s string) error {
	if s == "shared" || s == "exclusive" {
		return nil
	}
	return fmt.Errorf("%s is not an RDMA netns mode: use \"shared\" or \"exclusive\"", Quote(s))
}

// LinkName accepts the name of a soft RDMA device as `rdma link add`
// takes it: the kernel allows 1..63 bytes (IB_DEVICE_NAME_MAX), no '/',
// and rdmad refuses '%', which the kernel would expand into a name rdmad
// could never find again.
func LinkName(s string) error {
	switch {
	case s == "":
		return errors.New("must not be empty")
	case len(s) > 63:
		return fmt.Errorf("%s is %d bytes long; RDMA device names have at most 63", Quote(s), len(s))
	case s == "." || s == "..":
		return fmt.Errorf("%q is not a device name", s)
	case strings.ContainsRune(s, '%'):
		return fmt.Errorf("%q contains '%%': the kernel would pick the name, and rdmad could not track the device", s)
	}
	for _, r := range s {
		if r == '/' || r <= ' ' || r == 0x7f {
			return fmt.Errorf("%q contains %q, which a device name cannot contain", s, r)
		}
	}
	return nil
}

// NetdevName accepts what the kernel's dev_valid_name() does: 1..15 bytes
// (IFNAMSIZ-1), not "." or "..", no '/', ':' or whitespace.
func NetdevName(s string) error {
	switch {
	case s == "":
		return errors.New("must not be empty")
	case len(s) > 15:
		return fmt.Errorf("%s is %d bytes long; interface names have at most 15", Quote(s), len(s))
	case s == "." || s == "..":
		return fmt.Errorf("%q is not an interface name", s)
	}
	for _, r := range s {
		if r == '/' || r == ':' || r <= ' ' || r == 0x7f {
			return fmt.Errorf("%q contains %q, which an interface name cannot contain", s, r)
		}
	}
	return nil
}

// OneOf lists choices as messages offer them: "dscp" or "pcp".
func OneOf(choices []string) string {
	q := make([]string, len(choices))
	for i, c := range choices {
		q[i] = strconv.Quote(c)
	}
	if len(q) < 2 {
		return strings.Join(q, "")
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}

// Quote quotes a value for an error message, cut after 64 bytes: a
// caller's megabyte-long name must not come back whole in every error and
// log line.
func Quote(s string) string {
	const keep = 64
	if len(s) <= keep {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:keep]) + "..."
}
