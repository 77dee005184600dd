package verify

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// FormatSize prints a size as rdmactl reads it: "64 MiB", "unlimited".
func FormatSize(n uint64) string {
	if n == unix.RLIM_INFINITY {
		return "unlimited"
	}
	for _, u := range []struct {
		n    uint64
		name string
	}{{1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if n >= u.n && n%u.n == 0 {
			return fmt.Sprintf("%d %s", n/u.n, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

// ParseSize reads --size: bytes, or a number with K, M or G (base 1024).
func ParseSize(s string) (uint64, error) {
	t := strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(s)), "B"), "I")
	mult := uint64(1)
	switch {
	case strings.HasSuffix(t, "K"):
		mult, t = 1<<10, strings.TrimSuffix(t, "K")
	case strings.HasSuffix(t, "M"):
		mult, t = 1<<20, strings.TrimSuffix(t, "M")
	case strings.HasSuffix(t, "G"):
		mult, t = 1<<30, strings.TrimSuffix(t, "G")
	}
	n, err := strconv.ParseUint(t, 10, 64)
	if err != nil || n == 0 || n > (1<<40)/mult {
		return 0, fmt.Errorf("%q is not a size: write bytes or a number with K, M or G, such as 64M", s)
	}
	return n * mult, nil
}
