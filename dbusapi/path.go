package dbusapi

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/godbus/dbus/v5"
)

// EscapePathElement encodes s for use as one object path element, exactly
// as systemd's sd_bus_path_encode: [A-Za-z0-9] are kept, every other byte
// becomes _XX in lowercase hex, and "" becomes "_".
func EscapePathElement(s string) string {
	if s == "" {
		return "_"
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9') {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "_%02x", c)
		}
	}
	return b.String()
}

// UnescapePathElement reverses EscapePathElement.
func UnescapePathElement(e string) (string, error) {
	if e == "_" {
		return "", nil
	}
	var b strings.Builder
	for i := 0; i < len(e); i++ {
		if e[i] != '_' {
			b.WriteByte(e[i])
			continue
		}
		if i+2 >= len(e) {
			return "", fmt.Errorf("D-Bus path element %q: an escape cut short", e)
		}
		v, err := strconv.ParseUint(e[i+1:i+3], 16, 8)
		if err != nil {
			return "", fmt.Errorf("D-Bus path element %q: bad escape: %w", e, err)
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), nil
}

// DevicePath is the object path of an RDMA device.
func DevicePath(name string) dbus.ObjectPath {
	return dbus.ObjectPath(DevicesPath + "/" + EscapePathElement(name))
}

// PortPath is the object path of a port.
func PortPath(device string, port int) dbus.ObjectPath {
	return dbus.ObjectPath(fmt.Sprintf("%s/ports/%d", DevicePath(device), port))
}
