// Package kubernetes checks the DaemonSet and ConfigMap of contrib/kubernetes:
// strictly against the Kubernetes API models (validate.py, with Debian's
// python3-kubernetes), then what rdmad needs of them (host mounts, the
// capabilities it needs and no more), and the ConfigMap-to-drop-in path with
// the real rdmad-policy-sync script and the real rdmad.
package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/test/bustest"
	"github.com/rdmad/rdmad/test/livetest"
	"github.com/rdmad/rdmad/test/testdeps"
)

// The parts of the API objects the checks read (validate.py has already
// checked every field against the real models).
type object struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Data map[string]string `json:"data"`
	Spec struct {
		MinReadySeconds int `json:"minReadySeconds"`
		UpdateStrategy  struct {
			Type          string `json:"type"`
			RollingUpdate struct {
				MaxUnavailable any `json:"maxUnavailable"`
				MaxSurge       any `json:"maxSurge"`
			} `json:"rollingUpdate"`
		} `json:"updateStrategy"`
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Template struct {
			Metadata struct {
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
			Spec podSpec `json:"spec"`
		} `json:"template"`
	} `json:"spec"`
}

type podSpec struct {
	HostNetwork    bool        `json:"hostNetwork"`
	HostPID        bool        `json:"hostPID"`
	HostIPC        bool        `json:"hostIPC"`
	InitContainers []container `json:"initContainers"`
	Containers     []container `json:"containers"`
	Volumes        []struct {
		Name     string `json:"name"`
		HostPath *struct {
			Path string `json:"path"`
		} `json:"hostPath"`
		ConfigMap *struct {
			Name string `json:"name"`
		} `json:"configMap"`
	} `json:"volumes"`
}

type container struct {
	Name            string   `json:"name"`
	Image           string   `json:"image"`
	Command         []string `json:"command"`
	SecurityContext struct {
		Privileged               *bool `json:"privileged"`
		AllowPrivilegeEscalation *bool `json:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   bool  `json:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Add  []string `json:"add"`
			Drop []string `json:"drop"`
		} `json:"capabilities"`
	} `json:"securityContext"`
	VolumeMounts []struct {
		Name      string `json:"name"`
		MountPath string `json:"mountPath"`
		ReadOnly  bool   `json:"readOnly"`
	} `json:"volumeMounts"`
	ReadinessProbe *probe `json:"readinessProbe"`
	LivenessProbe  *probe `json:"livenessProbe"`
}

type probe struct {
	Exec *struct {
		Command []string `json:"command"`
	} `json:"exec"`
	InitialDelaySeconds int `json:"initialDelaySeconds"`
	PeriodSeconds       int `json:"periodSeconds"`
	TimeoutSeconds      int `json:"timeoutSeconds"`
	FailureThreshold    int `json:"failureThreshold"`
}

// manifests are the kustomization's resources; the ConfigMap is generated
// from policyFile (policyConfigMap).
var manifests = []string{"daemonset.yaml"}

const policyFile = "policy/50-kubernetes.toml"

// policyConfigMap writes the ConfigMap kustomization.yaml's generator makes
// of policyFile, as kustomize does before it appends the content hash to
// the name (and to the DaemonSet's reference), for validate.py.
func policyConfigMap(t *testing.T) string {
	t.Helper()
	text, err := os.ReadFile(policyFile)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "rdmad-policy", "namespace": "kube-system", "labels": map[string]string{"app.kubernetes.io/name": "rdmad"}},
		"data":     map[string]string{path.Base(policyFile): string(text)},
	})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "configmap.yaml")
	if err := os.WriteFile(p, doc, 0o644); err != nil { // JSON is YAML
		t.Fatal(err)
	}
	return p
}

var bins livetest.Binaries

func TestMain(m *testing.M) { livetest.Main(m, &bins) }

// load validates the manifests with validate.py and decodes what it prints.
func load(t *testing.T, files ...string) []object {
	t.Helper()
	testdeps.Python3Imports(t, "python3-kubernetes and python3-yaml", "validate.py")
	cmd := exec.Command("/usr/bin/python3", append([]string{"validate.py"}, files...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("validate.py %s: %v\n%s", strings.Join(files, " "), err, stderr.String())
	}
	var objs []object
	if err := json.Unmarshal(out, &objs); err != nil {
		t.Fatal(err)
	}
	return objs
}

// TestValidatorCatchesMistakes: validate.py refuses a misspelt field, a
// wrong type and a missing required field (so its pass means something).
func TestValidatorCatchesMistakes(t *testing.T) {
	testdeps.Python3Imports(t, "python3-kubernetes and python3-yaml", "validate.py")
	good, err := os.ReadFile("daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct{ from, to, want string }{
		"misspelt field": {"hostNetwork: true", "hostNetwrok: true", "hostNetwrok: no such field in V1PodSpec"},
		"wrong type":     {"runAsUser: 0", "runAsUser: root", "runAsUser: 'root' is not int"},
		"missing name":   {"- name: rdmad\n          image: rdmad", "- image: rdmad", "`name`, must not be `None`"},
		"bad apparmor":   {"type: Unconfined", "type: Unconfned", "appArmorProfile: not an AppArmorProfile"},
	} {
		t.Run(name, func(t *testing.T) {
			if !strings.Contains(string(good), c.from) {
				t.Fatalf("daemonset.yaml has no %q", c.from)
			}
			bad := filepath.Join(t.TempDir(), "bad.yaml")
			if err := os.WriteFile(bad, []byte(strings.Replace(string(good), c.from, c.to, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command("/usr/bin/python3", "validate.py", bad).CombinedOutput()
			if err == nil {
				t.Fatalf("validate.py accepted it")
			}
			if !strings.Contains(string(out), c.want) {
				t.Errorf("validate.py output lacks %q:\n%s", c.want, out)
			}
		})
	}
}

func find(t *testing.T, objs []object, kind string) object {
	t.Helper()
	var found []object
	for _, o := range objs {
		if o.Kind == kind {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d objects of kind %s, want 1", len(found), kind)
	}
	return found[0]
}

// TestDaemonSetPrivileges: host network, the host's /sys, /etc/rdma,
// /lib/modules and system bus, CAP_NET_ADMIN and CAP_SYS_MODULE for rdmad and
// nothing for the helper containers, never privileged.
func TestDaemonSetPrivileges(t *testing.T) {
	ds := find(t, load(t, manifests...), "DaemonSet")
	if ds.APIVersion != "apps/v1" || ds.Metadata.Namespace != "kube-system" {
		t.Errorf("DaemonSet %s in %q", ds.APIVersion, ds.Metadata.Namespace)
	}
	for k, v := range ds.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Metadata.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the pod template's labels", k, v)
		}
	}
	pod := ds.Spec.Template.Spec
	if !pod.HostNetwork {
		t.Error("no hostNetwork: RDMA netlink, rtnetlink and uevents are in the host's network namespace")
	}
	if pod.HostPID || pod.HostIPC {
		t.Error("hostPID/hostIPC are not needed")
	}

	hostPaths := map[string]string{} // volume -> host path
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	var paths []string
	for _, p := range hostPaths {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	if want := "/etc/dbus-1/system.d /etc/modprobe.d /etc/rdma /lib/modules /run/dbus /run/rdmad /sys /var/lib/rdmad"; strings.Join(paths, " ") != want {
		t.Errorf("host paths %v, want exactly %s", paths, want)
	}

	all := append(append([]container{}, pod.InitContainers...), pod.Containers...)
	var rdmad *container
	for i, c := range all {
		sc := c.SecurityContext
		if sc.Privileged != nil && *sc.Privileged {
			t.Errorf("%s is privileged", c.Name)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s allows privilege escalation", c.Name)
		}
		if !sc.ReadOnlyRootFilesystem {
			t.Errorf("%s has a writable root file system", c.Name)
		}
		if strings.Join(sc.Capabilities.Drop, " ") != "ALL" {
			t.Errorf("%s drops %v, want ALL", c.Name, sc.Capabilities.Drop)
		}
		if c.Image != "rdmad" {
			t.Errorf("%s image %q: every container uses the rdmad image (set in kustomization.yaml)", c.Name, c.Image)
		}
		if c.Name == "rdmad" {
			rdmad = &all[i]
			continue
		}
		if len(sc.Capabilities.Add) > 0 {
			t.Errorf("%s adds capabilities %v; only rdmad needs any", c.Name, sc.Capabilities.Add)
		}
	}
	if rdmad == nil {
		t.Fatal("no container named rdmad")
	}
	caps := append([]string{}, rdmad.SecurityContext.Capabilities.Add...)
	sort.Strings(caps)
	if strings.Join(caps, " ") != "NET_ADMIN SYS_MODULE" {
		t.Errorf("rdmad adds %v, want exactly NET_ADMIN SYS_MODULE (docs/decisions/boot.md)", caps)
	}
	if len(rdmad.Command) == 0 || rdmad.Command[0] != "/usr/sbin/rdmad" {
		t.Errorf("rdmad command %v", rdmad.Command)
	}
	mounts := map[string]string{} // mount path -> host path (+ " ro")
	for _, m := range rdmad.VolumeMounts {
		mounts[m.MountPath] = hostPaths[m.Name]
		if m.ReadOnly {
			mounts[m.MountPath] += " ro"
		}
	}
	for at, want := range map[string]string{"/sys": "/sys", "/etc/rdma": "/etc/rdma", "/lib/modules": "/lib/modules ro",
		"/etc/modprobe.d": "/etc/modprobe.d ro", "/run/dbus": "/run/dbus",
		// The root file system is read-only: the instance lock's directory
		// (host.LockFile) must be a writable mount, the host's.
		"/" + path.Dir(host.LockFile): "/" + path.Dir(host.LockFile),
		// The last good policy survives the pod: the host's state directory.
		"/" + path.Dir(config.LastGoodFile): "/" + path.Dir(config.LastGoodFile)} {
		if mounts[at] != want {
			t.Errorf("rdmad mounts %q at %s, want the host's %s", mounts[at], at, want)
		}
	}
}

// TestConfigMapIsADropIn: the ConfigMap's one key is a drop-in rdmad
// accepts, mounted where rdmad-policy-sync takes it from, and it leaves
// [memlock] out (the DaemonSet does not mount the host's limits.d).
func TestConfigMapIsADropIn(t *testing.T) {
	objs := load(t, append(manifests, policyConfigMap(t))...)
	cm, ds := find(t, objs, "ConfigMap"), find(t, objs, "DaemonSet")
	if len(cm.Data) != 1 {
		t.Fatalf("ConfigMap data keys %v, want one drop-in", cm.Data)
	}
	for key, text := range cm.Data {
		if key != "50-kubernetes.toml" {
			t.Errorf("ConfigMap key %q", key)
		}
		p, err := config.Parse(policyFile, []byte(text))
		if err != nil {
			t.Fatalf("rdmad rejects the ConfigMap's policy: %v", err)
		}
		if p.Memlock != nil {
			t.Errorf("the ConfigMap declares [memlock], which the DaemonSet cannot apply")
		}
		if len(p.RoCE) == 0 {
			t.Errorf("the example policy declares no RoCE rule")
		}
	}
	script, err := os.ReadFile("rdmad-policy-sync")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(script), "POLICY=${POLICY:-/policy/50-kubernetes.toml}") ||
		!strings.Contains(string(script), "DROPIN=${DROPIN:-/etc/rdma/rdmad.d/50-kubernetes.toml}") {
		t.Error("rdmad-policy-sync's defaults are not /policy/50-kubernetes.toml -> /etc/rdma/rdmad.d/50-kubernetes.toml")
	}
	pod := ds.Spec.Template.Spec
	cmVolume := ""
	for _, v := range pod.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == cm.Metadata.Name {
			cmVolume = v.Name
		}
	}
	if cmVolume == "" {
		t.Fatalf("the DaemonSet mounts no volume of ConfigMap %s", cm.Metadata.Name)
	}
	syncers := 0
	for _, c := range append(append([]container{}, pod.InitContainers...), pod.Containers...) {
		if len(c.Command) == 0 || c.Command[0] != "rdmad-policy-sync" {
			continue
		}
		syncers++
		has := map[string]bool{}
		for _, m := range c.VolumeMounts {
			has[m.Name+":"+m.MountPath] = true
		}
		if !has[cmVolume+":/policy"] || !has["etc-rdma:/etc/rdma"] {
			t.Errorf("%s mounts %v; needs the ConfigMap at /policy and the host's /etc/rdma", c.Name, has)
		}
	}
	if syncers != 1 {
		t.Errorf("%d containers run rdmad-policy-sync, want the init container only: a sidecar would apply a policy edit on every node at once, not node by node", syncers)
	}
}

// TestRolloutIsNodeByNode: a new policy or image is rolled out one node at
// a time, each node's new pod ready (rdmactl doctor --quiet --scope policy passes) for
// minReadySeconds before the next; the policy's ConfigMap is generated
// with kustomize's content-hash suffix, so an edit changes the template.
func TestRolloutIsNodeByNode(t *testing.T) {
	ds := find(t, load(t, manifests...), "DaemonSet")
	u := ds.Spec.UpdateStrategy
	if u.Type != "RollingUpdate" || u.RollingUpdate.MaxUnavailable != float64(1) || u.RollingUpdate.MaxSurge != nil {
		t.Errorf("updateStrategy %+v, want RollingUpdate with maxUnavailable 1 and no surge (two rdmads on a node refuse each other)", u)
	}
	if ds.Spec.MinReadySeconds < 10 {
		t.Errorf("minReadySeconds %d: a node should stay ready a while before the next one is replaced", ds.Spec.MinReadySeconds)
	}
	var probe []string
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == "rdmad" && c.ReadinessProbe != nil && c.ReadinessProbe.Exec != nil {
			probe = c.ReadinessProbe.Exec.Command
			if c.ReadinessProbe.TimeoutSeconds <= 1 {
				t.Errorf("readiness timeout %ds: doctor reads the host; the kubelet's default 1 s is too short", c.ReadinessProbe.TimeoutSeconds)
			}
		}
	}
	if strings.Join(probe, " ") != "rdmactl doctor --quiet --scope policy" {
		t.Errorf("rdmad's readiness probe runs %q, want rdmactl doctor --quiet --scope policy (the pod sees no /dev/infiniband)", probe)
	}

	k, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	gen := regexp.MustCompile(`(?m)^configMapGenerator:\n  - name: (\S+)\n    namespace: kube-system\n    files:\n      - (\S+)\n`).FindSubmatch(k)
	if gen == nil || string(gen[2]) != policyFile {
		t.Fatalf("kustomization.yaml does not generate the policy's ConfigMap from %s", policyFile)
	}
	if strings.Contains(string(k), "disableNameSuffixHash") {
		t.Error("kustomization.yaml disables the name hash: a policy edit would not roll out")
	}
	mounted := false
	for _, v := range ds.Spec.Template.Spec.Volumes {
		mounted = mounted || (v.ConfigMap != nil && v.ConfigMap.Name == string(gen[1]))
	}
	if !mounted {
		t.Errorf("the DaemonSet mounts no ConfigMap named %s (kustomize rewrites that reference to the hashed name)", gen[1])
	}
}

// TestKustomization: kubectl apply -k takes exactly the manifests.
func TestKustomization(t *testing.T) {
	b, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range regexp.MustCompile(`(?m)^  - (\S+\.yaml)$`).FindAllStringSubmatch(string(b), -1) {
		got = append(got, m[1])
	}
	if strings.Join(got, " ") != strings.Join(manifests, " ") {
		t.Errorf("kustomization resources %v, want %v", got, manifests)
	}
}

// TestContainerfile: the image is built from what `make package` produces
// and holds what the DaemonSet runs.
func TestContainerfile(t *testing.T) {
	b, err := os.ReadFile("Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	nfpm, err := os.ReadFile(filepath.Join(hosttest.RepoRoot(), "packaging/nfpm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, dst := range []string{"/usr/sbin/rdmad", "/usr/bin/rdmactl", "/usr/share/dbus-1/system.d/org.rdmad1.conf"} {
		if !strings.Contains(string(nfpm), "dst: "+dst+"\n") {
			t.Errorf("the .deb the image unpacks has no %s", dst)
		}
	}
	for _, want := range []string{"COPY dist/rdmad_*.deb", "dpkg-deb -x", "kmod",
		"COPY contrib/kubernetes/rdmad-policy-sync /usr/local/bin/rdmad-policy-sync"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("Containerfile lacks %q", want)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second) // guards a hang only
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPolicySyncFeedsRdmad runs the real rdmad-policy-sync as the pod does,
// with the ConfigMap's policy, against the real rdmad on a fixture host: the
// init run installs the D-Bus policy and the drop-in, then rdmad starts and
// applies it. The script's loop mode (not used by the DaemonSet, whose
// policy rolls out node by node; for a pod of your own that follows a
// ConfigMap live): an edit reaches rdmad, removing the key withdraws the
// drop-in, SIGTERM stops it.
func TestPolicySyncFeedsRdmad(t *testing.T) {
	cm := find(t, load(t, policyConfigMap(t)), "ConfigMap")
	addr := bustest.Start(t)
	root, env := livetest.DemoHost(t)

	policy := filepath.Join(t.TempDir(), "50-kubernetes.toml") // the ConfigMap volume
	if err := os.WriteFile(policy, []byte(cm.Data["50-kubernetes.toml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	dropin := filepath.Join(root, "etc/rdma/rdmad.d/50-kubernetes.toml")
	dbusPolicy := filepath.Join(t.TempDir(), "host-dbus/system.d/org.rdmad1.conf")
	syncEnv := append(os.Environ(), "POLICY="+policy, "DROPIN="+dropin, "INTERVAL=0.1",
		"DBUS_POLICY_SRC="+filepath.Join(hosttest.RepoRoot(), "units/org.rdmad1.conf"), "RDMAD="+bins.Rdmad+" --root "+root)

	once := exec.Command("./rdmad-policy-sync", "--once")
	once.Env = append(syncEnv, "DBUS_POLICY="+dbusPolicy)
	if out, err := once.CombinedOutput(); err != nil {
		t.Fatalf("rdmad-policy-sync --once: %v\n%s", err, out)
	}
	for _, f := range []string{dropin, dbusPolicy} {
		info, err := os.Stat(f)
		if err != nil || info.Mode().Perm() != 0o644 {
			t.Fatalf("%s: %v %v", f, err, info)
		}
	}
	if leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(dropin), ".*")); len(leftovers) > 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
	// As in the pod, the init container has run when rdmad starts.
	livetest.Start(t, bins, addr, root, env)
	tos := func(dev string) string {
		return hosttest.Read(t, root, host.ConfigfsPortPath(dev, 1, "default_roce_tos"))
	}
	// The ConfigMap declares TOS 106 for the mlx5_core ports.
	waitFor(t, "rdmad applies the ConfigMap's policy", func() bool { return tos("mlx5_0") == "106" && tos("mlx5_1") == "106" })
	if got := tos("rxe0"); got != "0" {
		t.Errorf("rxe0 (rdma_rxe) tos = %s: the policy matched the wrong driver", got)
	}

	sidecar := exec.Command("./rdmad-policy-sync")
	sidecar.Env = syncEnv
	out := &livetest.SyncBuffer{}
	sidecar.Stdout, sidecar.Stderr = out, out
	if err := sidecar.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- sidecar.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = sidecar.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("rdmad-policy-sync output:\n%s", out.String())
		}
	}()

	// kubectl apply of an edited ConfigMap: the kubelet swaps the file.
	edited := strings.Replace(cm.Data["50-kubernetes.toml"], "tos = 106", "tos = 77", 1)
	if edited == cm.Data["50-kubernetes.toml"] {
		t.Fatal("the ConfigMap has no `tos = 106` to edit")
	}
	if err := os.WriteFile(policy+".new", []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(policy+".new", policy); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the edited policy reaches rdmad", func() bool { return tos("mlx5_0") == "77" })

	// A copy that fails (here the ConfigMap file is a directory) leaves the
	// drop-in alone and the sidecar running.
	if err := os.Remove(policy); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(policy, 0o755); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the sidecar reports the failed copy", func() bool { return strings.Contains(out.String(), "did not install "+dropin) })
	if got := tos("mlx5_0"); got != "77" {
		t.Errorf("a failed copy changed the policy: tos %s", got)
	}
	if err := os.Remove(policy); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the drop-in is withdrawn", func() bool {
		_, err := os.Stat(dropin)
		return os.IsNotExist(err) && strings.Contains(out.String(), "removed "+dropin)
	})

	if err := sidecar.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Errorf("sidecar exit on SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("sidecar ignored SIGTERM")
	}
	if !strings.Contains(out.String(), "installed "+dropin) {
		t.Errorf("sidecar log:\n%s", out.String())
	}
}

// The init container refuses a policy that does not load with the host's
// other files: it exits 1 with rdmad's file:line errors and installs
// nothing, so the pod does not start and the rollout stops on this node.
func TestPolicySyncRefusesABadPolicy(t *testing.T) {
	root, _ := livetest.DemoHost(t)
	dropin := filepath.Join(root, "etc/rdma/rdmad.d/50-kubernetes.toml")
	good := "[[roce]]\ndriver = \"mlx5_core\"\ntos = 106\n"
	hosttest.Write(t, root, "etc/rdma/rdmad.d/50-kubernetes.toml", good)
	policy := filepath.Join(t.TempDir(), "50-kubernetes.toml")
	if err := os.WriteFile(policy, []byte("[[roce]]\ndriver = \"mlx5_core\"\ntos = 300\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	once := exec.Command("./rdmad-policy-sync", "--once")
	once.Env = append(os.Environ(), "POLICY="+policy, "DROPIN="+dropin, "RDMAD="+bins.Rdmad+" --root "+root)
	out, err := once.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "50-kubernetes.toml:3: roce[0].tos: 300 is out of range 0..255") ||
		!strings.Contains(string(out), "did not install "+dropin) {
		t.Fatalf("a bad policy: %v\n%s", err, out)
	}
	if got := hosttest.Read(t, root, "etc/rdma/rdmad.d/50-kubernetes.toml"); got != strings.TrimSpace(good) {
		t.Errorf("the drop-in in place changed: %q", got)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(dropin), ".*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
	// The same set with a good policy installs it.
	if err := os.WriteFile(policy, []byte(strings.Replace(good, "106", "72", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	again := exec.Command("./rdmad-policy-sync", "--once")
	again.Env = once.Env
	if out, err := again.CombinedOutput(); err != nil || !strings.Contains(string(out), "installed "+dropin) {
		t.Fatalf("a good policy: %v\n%s", err, out)
	}
}

// The readiness probe as the pod runs it, on the host as the pod sees it
// (test/hosts/pod: the host's sysfs, no /dev/infiniband, no
// /etc/libibverbs.d): with --scope policy it passes while the policy is in
// force, although doctor as a whole fails there; a declared setting that
// does not hold makes it fail.
func TestReadinessProbeOnThePodsView(t *testing.T) {
	cm := find(t, load(t, policyConfigMap(t)), "ConfigMap")
	ds := find(t, load(t, manifests...), "DaemonSet")
	var probe []string
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == "rdmad" {
			probe = c.ReadinessProbe.Exec.Command
		}
	}
	addr := bustest.Start(t)
	root := hosttest.Copy(t, "pod")
	hosttest.Write(t, root, "etc/rdma/rdmad.d/50-kubernetes.toml", cm.Data["50-kubernetes.toml"])
	env := append(os.Environ(), "PATH="+t.TempDir()+":"+os.Getenv("PATH"))
	livetest.Start(t, bins, addr, root, env)
	run := func(args ...string) (int, string) {
		cmd := exec.Command(bins.Rdmactl, append([]string{"--bus", addr}, args...)...)
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out)
	}
	if probe[0] != "rdmactl" {
		t.Fatalf("probe %v", probe)
	}
	if code, out := run(probe[1:]...); code != 0 || out != "" {
		t.Errorf("%v on the pod's view: exit %d %q, want 0 and nothing printed", probe, code, out)
	}
	if code, out := run("doctor"); code != 1 || !strings.Contains(out, "rdma_cm is missing") || !strings.Contains(out, "/etc/libibverbs.d") {
		t.Errorf("doctor without --scope on the pod's view: exit %d, want 1 for what the pod cannot see\n%s", code, out)
	}
	// mlx5_1's TOS cannot be written (its configfs attribute is broken):
	// the declared TOS does not hold, and the probe fails.
	tosFile := filepath.Join(root, host.ConfigfsPortPath("mlx5_1", 1, "default_roce_tos"))
	if err := os.Remove(tosFile); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(tosFile, 0o755); err != nil {
		t.Fatal(err)
	}
	_, _ = run("reconcile")
	if code, _ := run(probe[1:]...); code != 1 {
		t.Errorf("%v with a declared TOS that does not hold: exit %d, want 1", probe, code)
	}
	if code, out := run("-j", "doctor", "--scope", "policy"); !strings.Contains(out, `"id":"roce-tos-differs"`) || strings.Contains(out, "verbs") {
		t.Errorf("--scope policy: exit %d\n%s", code, out)
	}
}

// TestLivenessProbe: the kubelet restarts rdmad only when it has not
// answered on the bus for longer than rdmad's own reconnection to a
// restarted bus takes (its back-off, read from cmd/rdmad, plus a probe
// period), and each probe, readiness included, ends before the 25 s a
// D-Bus call waits by default. The probe's command passes against a
// running rdmad and fails within its timeout against a wedged one.
func TestLivenessProbe(t *testing.T) {
	ds := find(t, load(t, manifests...), "DaemonSet")
	var live, ready *probe
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == "rdmad" {
			live, ready = c.LivenessProbe, c.ReadinessProbe
		}
	}
	if live == nil || live.Exec == nil || len(live.Exec.Command) == 0 || live.Exec.Command[0] != "rdmactl" {
		t.Fatalf("rdmad's liveness probe %+v: want an rdmactl command over the bus", live)
	}
	src, err := os.ReadFile(filepath.Join(hosttest.RepoRoot(), "cmd/rdmad/bus.go"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`reconnectMax = (\d+) \* time\.Second`).FindSubmatch(src)
	if m == nil {
		t.Fatal("cmd/rdmad/bus.go no longer says reconnectMax = N * time.Second: read the back-off again")
	}
	backoff, _ := strconv.Atoi(string(m[1]))
	if window := live.PeriodSeconds * live.FailureThreshold; window <= 60 || window < backoff+live.PeriodSeconds {
		t.Errorf("liveness restarts after %d s of failures (period %d x threshold %d): want above 60 s and above rdmad's %d s back-off plus a period",
			window, live.PeriodSeconds, live.FailureThreshold, backoff)
	}
	for name, p := range map[string]*probe{"liveness": live, "readiness": ready} {
		if p.TimeoutSeconds < 2 || p.TimeoutSeconds >= 25 {
			t.Errorf("%s probe timeout %d s: want below D-Bus's 25 s default (and above the kubelet's 1 s)", name, p.TimeoutSeconds)
		}
	}

	addr := bustest.Start(t)
	root, env := livetest.DemoHost(t)
	d := livetest.Start(t, bins, addr, root, env)
	run := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(live.TimeoutSeconds)*time.Second)
		defer cancel()
		return exec.CommandContext(ctx, bins.Rdmactl, append([]string{"--bus", addr}, live.Exec.Command[1:]...)...).Run()
	}
	if err := run(); err != nil {
		t.Errorf("%v against a running rdmad: %v", live.Exec.Command, err)
	}
	// Wedged: the process is there, its bus connection is not served.
	if err := d.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Signal(syscall.SIGCONT) }()
	start := time.Now()
	if err := run(); err == nil {
		t.Errorf("%v passed against a wedged rdmad", live.Exec.Command)
	}
	if took := time.Since(start); took > time.Duration(live.TimeoutSeconds)*time.Second+5*time.Second {
		t.Errorf("the probe took %s against a wedged rdmad", took)
	}
}

// TestInitAsksTheBusToReload: on dbus-broker, which reads its policy files
// only when asked, the init step's rdmad-policy-sync installs rdmad's bus
// policy and asks the bus to reload (dbus-send, ReloadConfig over the
// host's /run/dbus, which the init container mounts): root may then own
// org.rdmad1, which the bus refused before. A bus that cannot be asked is
// said and is not fatal.
func TestInitAsksTheBusToReload(t *testing.T) {
	ds := find(t, load(t, manifests...), "DaemonSet")
	var mountsRunDbus bool
	for _, c := range ds.Spec.Template.Spec.InitContainers {
		for _, m := range c.VolumeMounts {
			mountsRunDbus = mountsRunDbus || (m.MountPath == "/run/dbus" && m.Name == "run-dbus")
		}
	}
	if !mountsRunDbus {
		t.Error("the init container does not mount the host's /run/dbus: it cannot ask the bus to reload")
	}
	if b, err := os.ReadFile("Containerfile"); err != nil || !strings.Contains(string(b), "dbus-bin") {
		t.Errorf("the image does not carry dbus-send (dbus-bin): %v", err)
	}
	if _, err := exec.LookPath("dbus-send"); err != nil {
		t.Skip("dbus-send not installed")
	}
	systemd := filepath.Join(t.TempDir(), "system.d")
	addr := bustest.StartBrokerConfig(t, func(sock string) string {
		return `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=` + sock + `</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
  <includedir>` + systemd + `</includedir>
</busconfig>
`
	})
	own := func() error {
		conn, err := dbus.Connect(addr)
		if err != nil {
			return err
		}
		defer conn.Close()
		reply, err := conn.RequestName(dbusapi.BusName, dbus.NameFlagDoNotQueue)
		if err == nil && reply != dbus.RequestNameReplyPrimaryOwner {
			err = fmt.Errorf("reply %v", reply)
		}
		return err
	}
	if err := own(); err == nil {
		t.Fatal("the bus let root own org.rdmad1 before its policy was installed: the test proves nothing")
	}
	policy := filepath.Join(t.TempDir(), "50-kubernetes.toml")
	if err := os.WriteFile(policy, []byte("[[roce]]\ndriver = \"mlx5_core\"\ntos = 106\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	root, _ := livetest.DemoHost(t)
	sync := func(extra ...string) string {
		cmd := exec.Command("./rdmad-policy-sync", "--once")
		cmd.Env = append(append(os.Environ(), "POLICY="+policy, "DROPIN="+filepath.Join(root, "etc/rdma/rdmad.d/50-kubernetes.toml"),
			"DBUS_POLICY="+filepath.Join(systemd, "org.rdmad1.conf"), "DBUS_POLICY_SRC="+filepath.Join(hosttest.RepoRoot(), "units/org.rdmad1.conf"),
			"RDMAD="+bins.Rdmad+" --root "+root, "DBUS_SYSTEM_BUS_ADDRESS="+addr), extra...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("rdmad-policy-sync --once: %v\n%s", err, out)
		}
		return string(out)
	}
	// Without the reload the bus does not know the new file.
	out := sync("DBUS_RELOAD=")
	if err := own(); err == nil {
		t.Fatalf("dbus-broker took the policy without a reload: the test proves nothing\n%s", out)
	}
	out = sync()
	if !strings.Contains(out, "asked the system bus to reload its configuration") {
		t.Errorf("rdmad-policy-sync did not ask the bus to reload:\n%s", out)
	}
	if err := own(); err != nil {
		t.Errorf("root cannot own org.rdmad1 after the init step: %v\n%s", err, out)
	}
	out = sync("DBUS_SYSTEM_BUS_ADDRESS=unix:path=/nonexistent/bus")
	if !strings.Contains(out, "could not ask the system bus to reload its configuration") || !strings.Contains(out, "systemctl reload dbus-broker") {
		t.Errorf("a bus that cannot be asked:\n%s", out)
	}
}

// TestPolicyShowsModulesOff: the sample policy carries, commented out, the
// [modules] enable = false of nodes whose driver container owns the
// modules; uncommented it is a policy rdmad takes, with module loading off.
func TestPolicyShowsModulesOff(t *testing.T) {
	text, err := os.ReadFile(policyFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(text), "\n#[modules]\n#enable = false\n") || !strings.Contains(string(text), "Network Operator") ||
		!strings.Contains(string(text), "rdma_rxe") {
		t.Fatalf("%s does not show [modules] enable = false for Network Operator nodes (and why Soft-RoCE nodes keep it):\n%s", policyFile, text)
	}
	overlay := strings.Replace(string(text), "#[modules]\n#enable = false", "[modules]\nenable = false", 1)
	dir := t.TempDir()
	f := filepath.Join(dir, "50-kubernetes.toml")
	if err := os.WriteFile(f, []byte(overlay), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bins.Rdmad, "--check-config", "--config", filepath.Join(dir, "none.toml"), "--with", f).CombinedOutput(); err != nil {
		t.Errorf("rdmad refuses the policy with [modules] enable = false: %v\n%s", err, out)
	}
	pol, err := config.Load(host.Files{}, f)
	if err != nil || pol.Modules.Enable {
		t.Errorf("the overlay's policy: modules %+v, %v", pol.Modules, err)
	}
}
