package capture

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/rdmad/rdmad/daemon/host"
)

// Files that hold much more than rdmad and doctor read are captured as
// that part only: what the rest holds (the host's users, its other
// services, its mounts, addresses of the kernel's memory) is not theirs
// to send.

// hostnames are the host's names, to be replaced: the kernel's (the UTS
// name), and /etc/hostname's when it differs.
func (c *capturer) hostnames() []string {
	var names []string
	if s, err := c.h.ReadString("proc/sys/kernel/hostname"); err == nil {
		names = append(names, strings.TrimSpace(s))
	}
	if b, err := host.ReadFileLimit(c.abs("etc/hostname"), host.MaxAttrSize); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				names = append(names, line)
				break
			}
		}
	}
	return names
}

// lines splits b into lines without their newlines.
func lines(b []byte) []string {
	s := strings.TrimSuffix(string(b), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func joinLines(ls []string) []byte {
	if len(ls) == 0 {
		return nil
	}
	return []byte(strings.Join(ls, "\n") + "\n")
}

// groupFilter keeps of /etc/group every group's name and number, and the
// members doctor judges: those of the memlock group, in that group and in
// every other group they are in (an entry of limits.conf for one of them
// can hold a member's memlock down). Other members and passwords go.
func groupFilter(memlock string) func([]byte) []byte {
	return func(b []byte) []byte {
		var members []string
		for _, l := range lines(b) {
			if f := strings.Split(l, ":"); len(f) >= 4 && f[0] == memlock {
				members = splitMembers(f[3])
			}
		}
		var out []string
		for _, l := range lines(b) {
			f := strings.Split(l, ":")
			if len(f) < 4 || f[0] == "" {
				continue
			}
			var keep []string
			for _, m := range splitMembers(f[3]) {
				if slices.Contains(members, m) {
					keep = append(keep, m)
				}
			}
			out = append(out, f[0]+":x:"+f[2]+":"+strings.Join(keep, ","))
		}
		return joinLines(out)
	}
}

func splitMembers(s string) []string {
	var out []string
	for _, m := range strings.Split(s, ",") {
		if m = strings.TrimSpace(m); m != "" {
			out = append(out, m)
		}
	}
	return out
}

// dockerFilter keeps of docker's daemon.json its default-ulimits (the
// memlock limit of every container).
func dockerFilter(b []byte) []byte {
	var cfg map[string]json.RawMessage
	out := map[string]json.RawMessage{}
	if json.Unmarshal(b, &cfg) == nil {
		if u, ok := cfg["default-ulimits"]; ok {
			out["default-ulimits"] = u
		}
	}
	j, _ := json.MarshalIndent(out, "", "  ")
	return append(j, '\n')
}

// kubeletFilter keeps of kubelet's device-plugin checkpoint the names of
// the RDMA resources registered (rdma/...), without their devices or the
// pods that use them.
func kubeletFilter(b []byte) []byte {
	var cp struct {
		Data struct {
			RegisteredDevices map[string]json.RawMessage
		}
	}
	out := map[string]map[string]map[string][]string{"Data": {"RegisteredDevices": {}}}
	if json.Unmarshal(b, &cp) == nil {
		for r := range cp.Data.RegisteredDevices {
			if strings.HasPrefix(r, "rdma/") {
				out["Data"]["RegisteredDevices"][r] = []string{}
			}
		}
	}
	j, _ := json.Marshal(out)
	return append(j, '\n')
}

// procModulesFilter keeps /proc/modules without the modules' load
// addresses (which say where the kernel is in memory).
func procModulesFilter(b []byte) []byte {
	var out []string
	for _, l := range lines(b) {
		f := strings.Fields(l)
		if len(f) >= 6 && strings.HasPrefix(f[5], "0x") {
			f[5] = "0x0000000000000000"
		}
		out = append(out, strings.Join(f, " "))
	}
	return joinLines(out)
}

// cmdlineFilter keeps of the kernel command line ib_core's parameters
// (the netns mode at boot): the rest (root=, ip=, console=) is not read.
func cmdlineFilter(b []byte) []byte {
	var keep []string
	for _, opt := range strings.Fields(string(b)) {
		if strings.HasPrefix(host.NormalizeModule(opt), "ib_core.") {
			keep = append(keep, opt)
		}
	}
	return []byte(strings.Join(keep, " ") + "\n")
}

// mountsFilter keeps of /proc/mounts configfs's mount (whether configfs
// rdma_cm can be there).
func mountsFilter(b []byte) []byte {
	var out []string
	for _, l := range lines(b) {
		if f := strings.Fields(l); len(f) >= 3 && f[2] == "configfs" {
			out = append(out, l)
		}
	}
	return joinLines(out)
}

// tcpListenFilter keeps of /proc/net/tcp and tcp6 the listening sockets'
// ports (NFS over RDMA on iWARP listens on TCP), their addresses zeroed.
func tcpListenFilter(b []byte) []byte {
	ls := lines(b)
	if len(ls) == 0 {
		return nil
	}
	out := []string{ls[0]}
	for _, l := range ls[1:] {
		f := strings.Fields(l)
		if len(f) < 4 || f[3] != "0A" {
			continue
		}
		local, port, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		zero := strings.Repeat("0", len(local))
		out = append(out, fmt.Sprintf("%4d: %s:%s %s:0000 0A", len(out)-1, zero, port, zero))
	}
	return joinLines(out)
}

// lldpadSocket is lldpad's abstract socket, which doctor looks for.
const lldpadSocket = "@/com/intel/lldpad"

// unixSocketFilter keeps of /proc/net/unix lldpad's socket, the kernel's
// address of the socket zeroed.
func unixSocketFilter(b []byte) []byte {
	ls := lines(b)
	if len(ls) == 0 {
		return nil
	}
	out := []string{ls[0]}
	for _, l := range ls[1:] {
		f := strings.Fields(l)
		if len(f) >= 8 && f[len(f)-1] == lldpadSocket {
			f[0] = strings.Repeat("0", len(strings.TrimSuffix(f[0], ":"))) + ":"
			out = append(out, strings.Join(f, " "))
		}
	}
	return joinLines(out)
}
