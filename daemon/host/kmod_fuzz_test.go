package host

import (
	"reflect"
	"strings"
	"testing"
)

// An index line longer than any buffer does not hide the aliases after it.
func TestModuleIndexLongLine(t *testing.T) {
	in := "alias xprtrdma rpcrdma\nalias " + strings.Repeat("x", 2<<20) + " y\nalias svcrdma rpcrdma\n"
	got := map[string][]string{}
	parseAliases([]byte(in), got)
	if !reflect.DeepEqual(got["svcrdma"], []string{"rpcrdma"}) || !reflect.DeepEqual(got["xprtrdma"], []string{"rpcrdma"}) {
		t.Errorf("aliases after a 2 MiB line: %d keys, svcrdma %q", len(got), got["svcrdma"])
	}
}

// FuzzModuleIndex: modules.alias and modules.builtin parse the same read
// whole as read in two halves cut at a line end; an alias name is a plain
// word (never a device-id pattern) in the kernel's '_' spelling.
func FuzzModuleIndex(f *testing.F) {
	f.Add("alias pci:v000015B3d00001017sv*sd*bc*sc*i* mlx5_core\nalias xprtrdma rpcrdma\n", "alias svcrdma rpcrdma\nalias rdma-ucm rdma_ucm\n")
	f.Add("kernel/fs/configfs/configfs.ko\n", "kernel/drivers/infiniband/core/ib_uverbs.ko\n\n.ko\n")
	f.Add("alias  a\tb \r\n", "alias a c\nalias a b c\n")
	f.Fuzz(func(t *testing.T, a, b string) {
		whole, parts := map[string][]string{}, map[string][]string{}
		parseAliases([]byte(a+"\n"+b), whole)
		parseAliases([]byte(a), parts)
		parseAliases([]byte(b), parts)
		if !reflect.DeepEqual(whole, parts) {
			t.Fatalf("aliases of a+b %q, of a then b %q", whole, parts)
		}
		for k, targets := range whole {
			if k == "" || strings.ContainsAny(k, "*?[: \t-") {
				t.Fatalf("alias key %q", k)
			}
			for _, m := range targets {
				if m == "" || strings.ContainsAny(m, " \t-") {
					t.Fatalf("alias %q -> %q", k, m)
				}
			}
		}
		bw, bp := map[string]bool{}, map[string]bool{}
		parseBuiltin([]byte(a+"\n"+b), bw)
		parseBuiltin([]byte(a), bp)
		parseBuiltin([]byte(b), bp)
		if !reflect.DeepEqual(bw, bp) {
			t.Fatalf("builtin of a+b %v, of a then b %v", bw, bp)
		}
		for m := range bw {
			if m == "" || strings.ContainsAny(m, "/-\n") {
				t.Fatalf("builtin %q", m)
			}
		}
	})
}
