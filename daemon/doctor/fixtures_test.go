package doctor_test

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/memlock"
	"github.com/rdmad/rdmad/daemon/netns"
)

// On every fixture host doctor reports what is wrong there and nothing
// more. The sysfs-only fixtures are hosts before rdma-core's user space and
// any memlock setup: those problems are real there, and listed here in
// full; a finding added or lost fails the test.
func TestEachFixtureHostReportsWhatIsWrongThere(t *testing.T) {
	bare := []string{
		"fail verbs-modules-missing host",
		"fail verbs-providers-missing host",
		"warn memlock-login-low host",
		"warn memlock-services-low host",
	}
	with := func(extra ...string) []string {
		out := append(append([]string{}, bare...), extra...)
		sort.Strings(out)
		return out
	}
	for _, tc := range []struct {
		host string
		want []string
	}{
		{"mlx5", with()},
		{"mlx4", with()}, // IB port with SM LID 1 and one RoCE port: both fine
		{"hfi1", with()},
		{"rxe", with()}, // a healthy Soft-RoCE port: no finding about it
		{"siw", with()}, // a healthy Soft-iWARP port: none either
		{"sparse", with("warn port-not-active bnxt_re0/1")},
		// rdma-core's user space, no memlock set up yet (rdmad's policy
		// renders it), and the mixed modes its drop-in declares.
		{"demo", []string{"warn memlock-login-low host", "warn memlock-services-low host", "warn roce-modes-mixed host"}},
		{"rxe-ready", []string{}},
		{"ib-ready", []string{}},
	} {
		t.Run(tc.host, func(t *testing.T) {
			root := hosttest.Copy(t, tc.host)
			if tc.host == "ib-ready" {
				root = readyIB(t)
			}
			fs := diagnose(t, root)
			if got := problems(fs); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("problems = %q\nwant %q\nall:\n%s", got, tc.want, dump(fs))
			}
			for _, f := range fs {
				if f.Severity != doctor.SeverityOK && f.Fix == "" {
					t.Errorf("%s %s has no fix", f.ID, f.Subject)
				}
				if f.Severity == doctor.SeverityOK && f.Fix != "" {
					t.Errorf("ok finding %s has a fix %q", f.ID, f.Fix)
				}
				if strings.Contains(f.Finding, "\n") || f.Finding == "" {
					t.Errorf("%s: finding must be one line: %q", f.ID, f.Finding)
				}
			}
		})
	}
}

// The healthy hosts are healthy for the right reasons: each check ran and
// said so.
func TestHealthyHostsShowWhatWasChecked(t *testing.T) {
	rxe := diagnose(t, hosttest.Copy(t, "rxe-ready"))
	for _, want := range [][2]string{
		{"config-loaded", "host"}, {"link-present", "link rxe0"}, {"port-active", "rxe0/1"},
		{"verbs-ready", "host"}, {"verbs-providers", "host"}, {"memlock-login", "host"},
		{"memlock-services", "host"}, {"nfs-rdma-off", "host"}, {"netns-mode", "host"},
	} {
		must(t, rxe, want[0], want[1])
	}
	if f := must(t, rxe, "memlock-login", "host"); !strings.Contains(f.Finding, "members of group rdma get memlock unlimited") {
		t.Errorf("memlock-login: %q", f.Finding)
	}
	ib := diagnose(t, readyIB(t))
	for _, want := range [][2]string{
		{"port-active", "mlx4_0/1"}, {"port-active", "mlx4_0/2"}, {"nfs-rdma", "host"},
		{"memlock-container", "host"}, {"netns-mode", "host"},
	} {
		must(t, ib, want[0], want[1])
	}
	// IPoIB is shown even when fine, with the port it sits on.
	if f := must(t, ib, "ipoib", "netdev ib0"); f.Finding != "IPoIB ib0 on mlx4_0/1: connected mode, MTU 65520" {
		t.Errorf("ib0: %q", f.Finding)
	}
	if f := must(t, ib, "ipoib", "netdev ib1"); f.Finding != "IPoIB ib1 on mlx4_0/2: datagram mode, MTU 4092" {
		t.Errorf("ib1: %q", f.Finding)
	}
}

// The rdmad-managed files in the fixtures are exactly what rdmad renders,
// so the healthy hosts stay what rdmad would make.
func TestReadyFixturesHoldWhatRdmadWrites(t *testing.T) {
	pol := policyOf(t, hosttest.FixtureDir("rxe-ready"))
	for rel, want := range map[string][]byte{
		memlock.LimitsFile:  memlock.RenderLimits(pol.Memlock),
		memlock.SystemdFile: memlock.RenderSystemd(pol.Memlock),
	} {
		if got, _ := os.ReadFile(filepath.Join(hosttest.FixtureDir("rxe-ready"), rel)); string(got) != string(want) {
			t.Errorf("rxe-ready %s =\n%s\nrdmad renders\n%s", rel, got, want)
		}
	}
	got, _ := os.ReadFile(filepath.Join(hosttest.FixtureDir("ib-ready"), netns.ModprobeFile))
	if want := netns.Render(config.NetnsExclusive); string(got) != string(want) {
		t.Errorf("ib-ready %s =\n%s\nrdmad renders\n%s", netns.ModprobeFile, got, want)
	}
}

// Every finding id doctor can emit is listed in rdmactl(8), where scripts
// look them up.
func TestEveryFindingIDIsDocumented(t *testing.T) {
	man, err := os.ReadFile(filepath.Join(hosttest.RepoRoot(), "docs", "rdmactl.8"))
	if err != nil {
		t.Fatal(err)
	}
	srcs, _ := filepath.Glob("*.go")
	re := regexp.MustCompile(`d\.(?:ok|warn|fail)\("([a-z0-9-]+)"`)
	n := 0
	for _, src := range srcs {
		if strings.HasSuffix(src, "_test.go") {
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			n++
			if !strings.Contains(string(man), `.B `+m[1]+"\n") {
				t.Errorf("finding id %s (%s) is not documented in docs/rdmactl.8 as .B %s", m[1], src, m[1])
			}
		}
	}
	if n < 30 {
		t.Fatalf("found only %d finding ids in the sources: the pattern no longer matches", n)
	}
}
