package host_test

import (
	"os"
	"reflect"
	"testing"

	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

func TestMissingModulesKnowsAliasesAndBuiltins(t *testing.T) {
	root := hosttest.Copy(t, "rxe")
	h := host.New(root)
	names := []string{"xprtrdma", "svcrdma", "configfs", "ib_uverbs", "rdma-rxe"}
	// A fixture without the kernel's module indexes: only loaded modules count.
	got, err := h.MissingModules(names)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"xprtrdma", "svcrdma", "ib_uverbs"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("without indexes: missing %q, want %q", got, want)
	}

	hosttest.Write(t, root, host.ProcOSRelease, "6.1.0-28-amd64\n")
	hosttest.Write(t, root, "lib/modules/6.1.0-28-amd64/modules.alias",
		"alias pci:v000015B3d00001017sv*sd*bc*sc*i* mlx5_core\nalias xprtrdma rpcrdma\nalias svcrdma rpcrdma\nalias rdma-ucm rdma_ucm\n")
	hosttest.Write(t, root, "lib/modules/6.1.0-28-amd64/modules.builtin", "kernel/fs/configfs/configfs.ko\nkernel/drivers/infiniband/core/ib_uverbs.ko\n")
	// rpcrdma not loaded yet: both of its aliases are missing; ib_uverbs is built in.
	got, _ = h.MissingModules(names)
	if want := []string{"xprtrdma", "svcrdma"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("rpcrdma absent: missing %q, want %q", got, want)
	}
	hosttest.Write(t, root, "proc/modules", "rdma_rxe 1 0 - Live 0x0\nrpcrdma 1 0 - Live 0x0\n")
	if got, _ = h.MissingModules(names); got != nil {
		t.Errorf("rpcrdma loaded: still missing %q", got)
	}
}

func TestModuleDeps(t *testing.T) {
	root := hosttest.Copy(t, "ib-ready")
	h := host.New(root)
	deps, err := h.ModuleDeps()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"ib_uverbs", "ib_core", "mlx4_core"}; !reflect.DeepEqual(deps["mlx4_ib"], want) {
		t.Errorf("mlx4_ib needs %v, want %v", deps["mlx4_ib"], want)
	}
	if d, ok := deps["ib_core"]; !ok || len(d) != 0 {
		t.Errorf("ib_core: %v %v", d, ok)
	}
	if err := os.Remove(h.Path("lib/modules/6.1.0-28-amd64/modules.dep")); err != nil {
		t.Fatal(err)
	}
	if deps, err := h.ModuleDeps(); err == nil || deps != nil {
		t.Errorf("without modules.dep: %v, %v", deps, err)
	}
}
