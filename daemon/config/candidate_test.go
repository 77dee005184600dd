package config

import (
	"errors"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

func TestCheckDropInName(t *testing.T) {
	for _, ok := range []string{"50-ansible.toml", "a.toml", PersistedName} {
		if err := CheckDropInName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".toml", ".hidden.toml", "../rdmad.toml", "a/b.toml", "x.conf", "x.toml/", "bad\nname.toml",
		"\xff.toml", strings.Repeat("a", 252) + ".toml", "/etc/rdma/rdmad.toml"} {
		if err := CheckDropInName(bad); err == nil {
			t.Errorf("%q taken", bad)
		}
	}
}

// The candidate is one more drop-in, or takes the place of the one of its
// name; it goes through the loader as a file does, nesting check first.
func TestWithData(t *testing.T) {
	files := dirReader{
		"/etc/rdma/rdmad.toml":              "[[roce]]\ndevice = \"mlx5_*\"\ntos = 106\n",
		"/etc/rdma/rdmad.d/50-ansible.toml": "[[roce]]\ndevice = \"mlx5_0\"\ntos = 1\n",
		"/etc/rdma/rdmad.d/60-other.toml":   "[netns]\nmode = \"shared\"\n",
	}
	cand := []byte("\n[[roce]]\ndevice = \"mlx5_0\"\nport = 1\ntos = 96\n")
	pol, err := Load(WithData(files, "/etc/rdma/rdmad.d", cand, "50-ansible.toml"), "/etc/rdma/rdmad.toml")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(pol.Files, " "); got != "/etc/rdma/rdmad.toml /etc/rdma/rdmad.d/50-ansible.toml /etc/rdma/rdmad.d/60-other.toml" {
		t.Errorf("files %s", got)
	}
	if len(pol.RoCE) != 2 || pol.RoCE[1].Source.String() != "/etc/rdma/rdmad.d/50-ansible.toml:2" {
		t.Errorf("rules %+v: the candidate does not replace the drop-in of its name", pol.RoCE)
	}
	pol, err = Load(WithData(files, "/etc/rdma/rdmad.d", cand, "55-new.toml"), "/etc/rdma/rdmad.toml")
	if err != nil || len(pol.RoCE) != 3 || pol.RoCE[2].Source.File != "/etc/rdma/rdmad.d/55-new.toml" {
		t.Errorf("added candidate: %v %+v", err, pol)
	}
	deep := []byte("x = " + strings.Repeat("[", 100000) + "\n")
	_, err = Load(WithData(files, "/etc/rdma/rdmad.d", deep, "55-new.toml"), "/etc/rdma/rdmad.toml")
	var ce *Error
	if !errors.As(err, &ce) || ce.Pos.String() != "/etc/rdma/rdmad.d/55-new.toml:1" {
		t.Errorf("nested candidate: %v, want an error at 55-new.toml:1", err)
	}
}

// dirReader is a Reader of whole paths whose directories list their files.
type dirReader map[string]string

func (m dirReader) ReadFile(name string) ([]byte, error) {
	if b, ok := m[name]; ok {
		return []byte(b), nil
	}
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
}

func (m dirReader) ReadDir(dir string) ([]string, error) {
	var out []string
	for n := range m {
		if filepath.Dir(n) == dir {
			out = append(out, filepath.Base(n))
		}
	}
	sort.Strings(out)
	return out, nil
}
