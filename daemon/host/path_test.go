package host

import (
	"path"
	"path/filepath"
	"strconv"
	"testing"
)

// Path and ConfigfsPortPath take a short cut for clean names; whatever
// they are given, they say what filepath.Join and path.Join say.
func FuzzPathIsJoin(f *testing.F) {
	for _, s := range []string{"sys/class/infiniband", "a", "", ".", "..", "a/../b", "a//b", "/abs", "a/", "./a", "a/.", "mlx5_0", "a/b/..", "...", ".a", "a.."} {
		f.Add(s, "default_roce_tos")
		f.Add("mlx5_0", s)
	}
	roots := []string{"/", "/tmp/root", "/tmp/root/", "/tmp//root/.", "rel/root", "", ".", "./", "./rel/../root"}
	f.Fuzz(func(t *testing.T, rel, attr string) {
		for _, root := range roots {
			h := New(root)
			want := filepath.Join(h.Root, rel)
			if got := h.Path(rel); got != want {
				t.Errorf("root %q: Path(%q) = %q, filepath.Join says %q", root, rel, got, want)
			}
		}
		for _, port := range []int{1, 2, 10} {
			want := path.Join(ConfigfsRdmaCM, rel, "ports", strconv.Itoa(port), attr)
			if got := ConfigfsPortPath(rel, port, attr); got != want {
				t.Errorf("ConfigfsPortPath(%q, %d, %q) = %q, path.Join says %q", rel, port, attr, got, want)
			}
			want = path.Join(ConfigfsRdmaCM, rel, "ports", strconv.Itoa(port))
			if got := ConfigfsPortPath(rel, port); got != want {
				t.Errorf("ConfigfsPortPath(%q, %d) = %q, path.Join says %q", rel, port, got, want)
			}
		}
	})
}
