// Package slurm tests rdmad-healthcheck, Slurm's HealthCheckProgram on
// rdmactl doctor: the real script, the real rdmactl and rdmad on a
// fixture host and a private bus, and a stand-in scontrol that keeps the
// node's state in a file (the real slurmctld and slurmd run in the trixie
// VM test).
package slurm

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/test/bustest"
	"github.com/rdmad/rdmad/test/livetest"
)

var bins livetest.Binaries

func TestMain(m *testing.M) { livetest.Main(m, &bins) }

// fakeScontrol answers `show node` from a state file (State=, Reason=) and
// records every call; `update` changes the state as slurmctld would: a
// resumed node still shows its last reason, as Slurm's scontrol does.
const fakeScontrol = `#!/bin/sh
echo "$*" >> "$SCONTROL_STATE.calls"
state=$(sed -n 1p "$SCONTROL_STATE"); reason=$(sed -n 2p "$SCONTROL_STATE")
case $1 in
show)
	echo "NodeName=$3 Arch=x86_64 CoresPerSocket=1"
	echo "   State=$state ThreadsPerCore=1"
	[ -n "$reason" ] && echo "   Reason=$reason [root@2026-03-01T08:00:00]"
	exit 0 ;;
update)
	for a in "$@"; do
		case $a in
		state=drain) state=IDLE+DRAIN ;;
		state=resume) state=IDLE ;;
		reason=*) reason=${a#reason=} ;;
		esac
	done
	printf '%s\n%s\n' "$state" "$reason" > "$SCONTROL_STATE"
	exit 0 ;;
esac
exit 1
`

type slurm struct {
	t     *testing.T
	state string // the node's state file
	env   []string
}

func newSlurm(t *testing.T, rdmactl string, extra ...string) *slurm {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "scontrol"), []byte(fakeScontrol), 0o755); err != nil {
		t.Fatal(err)
	}
	s := &slurm{t: t, state: filepath.Join(dir, "node")}
	s.set("IDLE", "")
	s.env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "SCONTROL_STATE="+s.state,
		"RDMACTL="+rdmactl, "RDMAD_HEALTHCHECK_CONF="+filepath.Join(dir, "none.conf"), "SLURMD_NODENAME=node1",
		"STATE_DIR="+filepath.Join(dir, "run"))
	s.env = append(s.env, extra...)
	return s
}

func (s *slurm) set(state, reason string) {
	if err := os.WriteFile(s.state, []byte(state+"\n"+reason+"\n"), 0o644); err != nil {
		s.t.Fatal(err)
	}
}

func (s *slurm) node() (state, reason string) {
	b, _ := os.ReadFile(s.state)
	l := strings.Split(string(b), "\n")
	return l[0], l[1]
}

// rdmactl makes the check run another rdmactl command from now on.
func (s *slurm) rdmactl(cmd string) {
	for i, e := range s.env {
		if strings.HasPrefix(e, "RDMACTL=") {
			s.env[i] = "RDMACTL=" + cmd
		}
	}
}

func (s *slurm) calls() string {
	b, _ := os.ReadFile(s.state + ".calls")
	return string(b)
}

// run runs the health check as slurmd does; it must exit 0 whatever it
// found, within 45 s.
func (s *slurm) run() string {
	s.t.Helper()
	cmd := exec.Command("./rdmad-healthcheck")
	cmd.Env = s.env
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		s.t.Fatalf("rdmad-healthcheck: %v (it must always exit 0)\n%s", err, out)
	}
	if took := time.Since(start); took > 45*time.Second {
		s.t.Errorf("rdmad-healthcheck took %s; slurmd kills it at 60 s", took)
	}
	return string(out)
}

// A failing finding drains the node naming it, the fix resumes it; a node
// drained for another reason is neither re-drained nor resumed.
func TestHealthCheckDrainsAndResumes(t *testing.T) {
	addr := bustest.Start(t)
	root, env := livetest.DemoHost(t)
	livetest.Start(t, bins, addr, root, env)
	s := newSlurm(t, bins.Rdmactl+" --bus "+addr)

	s.run()
	if st, r := s.node(); st != "IDLE" || r != "" || strings.Contains(s.calls(), "update") {
		t.Fatalf("a healthy node was touched: %s %q\n%s", st, r, s.calls())
	}

	// The site expects rxe0 at 1000 Gb/s: an expectation not met fails.
	dropIn := filepath.Join(root, "etc/rdma/rdmad.d/50-expect.toml")
	hosttest.Write(t, root, "etc/rdma/rdmad.d/50-expect.toml", "[[expect]]\ndevice = \"rxe0\"\nrate = 1000\n")
	reload(t, addr)
	s.run()
	if st, r := s.node(); st != "IDLE+DRAIN" || r != "rdmad: port-rate-low rxe0/1" {
		t.Fatalf("after a failing finding: %s %q\n%s", st, r, s.calls())
	}
	if !strings.Contains(s.calls(), `update nodename=node1 state=drain reason=rdmad: port-rate-low rxe0/1`) {
		t.Errorf("calls:\n%s", s.calls())
	}
	// Again: already drained for it, no second update.
	before := strings.Count(s.calls(), "update")
	s.run()
	if strings.Count(s.calls(), "update") != before {
		t.Errorf("drained again for the same reason:\n%s", s.calls())
	}

	// The fix: the node is resumed.
	if err := os.Remove(dropIn); err != nil {
		t.Fatal(err)
	}
	reload(t, addr)
	s.run()
	if st, r := s.node(); st != "IDLE" {
		t.Fatalf("after the fix: %s %q\n%s", st, r, s.calls())
	}

	// An administrator's drain is theirs.
	s.set("IDLE+DRAIN", "bad DIMM, ticket 4711")
	s.run()
	hosttest.Write(t, root, "etc/rdma/rdmad.d/50-expect.toml", "[[expect]]\ndevice = \"rxe0\"\nrate = 1000\n")
	reload(t, addr)
	s.run()
	if st, r := s.node(); st != "IDLE+DRAIN" || r != "bad DIMM, ticket 4711" {
		t.Errorf("the administrator's drain was changed: %s %q\n%s", st, r, s.calls())
	}

	// The administrator resumes the node; scontrol still shows their
	// reason on the idle node, which is no drain of theirs any more: the
	// failing finding drains it.
	s.set("IDLE", "bad DIMM, ticket 4711")
	s.run()
	if st, r := s.node(); st != "IDLE+DRAIN" || r != "rdmad: port-rate-low rxe0/1" {
		t.Errorf("a resumed node with its old reason shown: %s %q\n%s", st, r, s.calls())
	}
}

// A lost adapter drains the node: the [[expect]] rule that names mlx5_1
// by PCI address fails expect-missing once it is gone, and the node is
// resumed when it is back.
func TestHealthCheckDrainsALostAdapter(t *testing.T) {
	addr := bustest.Start(t)
	root, env := livetest.DemoHost(t)
	hosttest.Write(t, root, "etc/rdma/rdmad.d/50-expect.toml", "[[expect]]\npci = \"0000:3b:00.1\"\nstate = \"up\"\n")
	livetest.Start(t, bins, addr, root, env)
	s := newSlurm(t, bins.Rdmactl+" --bus "+addr)
	s.run()
	if st, r := s.node(); st != "IDLE" || r != "" {
		t.Fatalf("with the adapter: %s %q\n%s", st, r, s.calls())
	}
	link := filepath.Join(root, "sys/class/infiniband/mlx5_1")
	target, err := os.Readlink(link)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	_ = exec.Command(bins.Rdmactl, "--bus", addr, "reconcile").Run()
	s.run()
	if st, r := s.node(); st != "IDLE+DRAIN" || r != "rdmad: expect-missing mlx5_1" {
		t.Fatalf("without the adapter: %s %q\n%s", st, r, s.calls())
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	_ = exec.Command(bins.Rdmactl, "--bus", addr, "reconcile").Run()
	s.run()
	if st, r := s.node(); st != "IDLE" {
		t.Errorf("with the adapter back: %s %q\n%s", st, r, s.calls())
	}
}

func reload(t *testing.T, addr string) {
	t.Helper()
	// reload exits 1 when a pass fails; the policy is in force either way.
	_ = exec.Command(bins.Rdmactl, "--bus", addr, "reload").Run()
}

// rdmad not answering: the node is drained only after NO_ANSWER_DRAIN (3)
// runs in a row got no answer, saying so; an answer in between starts the
// count again, and the answer that passes resumes the node. A hung
// rdmactl counts as no answer within DOCTOR_TIMEOUT; the node's name comes
// from the configuration file when set there; ON_ERROR=ignore never drains.
func TestHealthCheckWhenDoctorDoesNotAnswer(t *testing.T) {
	addr := bustest.Start(t)
	root, env := livetest.DemoHost(t)
	livetest.Start(t, bins, addr, root, env)
	answers, silent := bins.Rdmactl+" --bus "+addr, bins.Rdmactl+" --bus unix:path=/nonexistent/bus"
	s := newSlurm(t, silent)
	for i := 1; i <= 2; i++ {
		s.run()
		if st, r := s.node(); st != "IDLE" || strings.Contains(s.calls(), "update") {
			t.Fatalf("no answer %d of 3: %s %q\n%s", i, st, r, s.calls())
		}
	}
	s.rdmactl(answers) // an answer starts the count again
	s.run()
	s.rdmactl(silent)
	for i := 1; i <= 2; i++ {
		s.run()
	}
	if st, r := s.node(); st != "IDLE" {
		t.Fatalf("drained after an answer and two runs without one: %s %q", st, r)
	}
	s.run()
	st, r := s.node()
	if st != "IDLE+DRAIN" || !strings.HasPrefix(r, "rdmad: no-answer host: doctor did not answer 3 times in a row: rdmactl: ") {
		t.Fatalf("three runs without an answer: %s %q\n%s", st, r, s.calls())
	}
	s.run() // a fourth: still drained for it, the reason counts on
	if st, r := s.node(); st != "IDLE+DRAIN" || !strings.Contains(r, "4 times in a row") {
		t.Errorf("four runs without an answer: %s %q", st, r)
	}
	s.rdmactl(answers)
	s.run()
	if st, r := s.node(); st != "IDLE" {
		t.Errorf("rdmad answers again and passes: %s %q\n%s", st, r, s.calls())
	}

	dir := t.TempDir()
	hang := filepath.Join(dir, "hang")
	if err := os.WriteFile(hang, []byte("#!/bin/sh\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "slurm-healthcheck.conf")
	if err := os.WriteFile(conf, []byte("NODENAME=node042\nDOCTOR_TIMEOUT=1\nNO_ANSWER_DRAIN=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s = newSlurm(t, hang, "RDMAD_HEALTHCHECK_CONF="+conf)
	start := time.Now()
	s.run()
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("a hung rdmactl held the check %s past its 1 s bound", took)
	}
	if st, r := s.node(); st != "IDLE+DRAIN" || r != "rdmad: no-answer host: doctor did not answer 1 times in a row: no answer within 1s" ||
		!strings.Contains(s.calls(), "nodename=node042") {
		t.Errorf("hung rdmactl: %s %q\n%s", st, r, s.calls())
	}

	s = newSlurm(t, silent, "ON_ERROR=ignore", "NO_ANSWER_DRAIN=1")
	s.run()
	if st, _ := s.node(); st != "IDLE" {
		t.Errorf("ON_ERROR=ignore drained: %s", st)
	}
}

// Without SLURMD_NODENAME the node is hostname -s.
func TestHealthCheckNodeNameDefault(t *testing.T) {
	s := newSlurm(t, bins.Rdmactl+" --bus unix:path=/nonexistent/bus", "NO_ANSWER_DRAIN=1")
	var env []string
	for _, e := range s.env {
		if !strings.HasPrefix(e, "SLURMD_NODENAME=") {
			env = append(env, e)
		}
	}
	s.env = env
	s.run()
	short, err := exec.Command("hostname", "-s").Output()
	if err != nil {
		t.Skip("no hostname command")
	}
	if !strings.Contains(s.calls(), "show node "+strings.TrimSpace(string(short))) {
		t.Errorf("node name is not hostname -s:\n%s", s.calls())
	}
}

// VERIFY=yes: a failing verify step drains naming it.
func TestHealthCheckVerify(t *testing.T) {
	addr := bustest.Start(t)
	root, env := livetest.DemoHost(t)
	livetest.Start(t, bins, addr, root, env)
	noTools := t.TempDir()
	s := newSlurm(t, bins.Rdmactl+" --bus "+addr, "VERIFY=yes", "VERIFY_ARGS=--root "+root+" --timeout 2s --size 1K")
	for i, e := range s.env { // the stand-in scontrol, and no RDMA tool
		if strings.HasPrefix(e, "PATH=") {
			s.env[i] = "PATH=" + filepath.Dir(s.state) + ":" + noTools + ":/usr/bin:/bin"
		}
	}
	s.run()
	if st, r := s.node(); st != "IDLE+DRAIN" || r != "rdmad: verify-rc mlx4_0/1" {
		t.Errorf("verify failing: %s %q\n%s", st, r, s.calls())
	}
}
