package config

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// A saved snapshot parses back to the same policy, every declaration at
// the file and line it had, even after the files changed or went away.
func TestSnapshotRoundTripKeepsFileAndLine(t *testing.T) {
	root := t.TempDir()
	main := writeFile(t, root, MainFile, "[memlock]\nsoft = \"64G\"\n")
	writeFile(t, root, DropInDir+"/50-roce.toml", "# a comment\n\n[[roce]]\ndevice = \"mlx5_*\"\ntos = 106\n")
	writeFile(t, root, DropInDir+"/"+PersistedName, "[[link]]\nname = \"rxe0\"\ntype = \"rxe\"\nnetdev = \"eth1\"\n")
	want, snap, err := LoadSnapshot(files, main)
	if err != nil {
		t.Fatal(err)
	}
	b := snap.Marshal()
	writeFile(t, root, DropInDir+"/50-roce.toml", "garbage")
	writeFile(t, root, DropInDir+"/10-new.toml", "[netns]\nmode = \"exclusive\"\n")
	back, err := ParseSnapshot("saved", b)
	if err != nil {
		t.Fatal(err)
	}
	if !back.Same(snap) {
		t.Fatalf("snapshot changed through Marshal/ParseSnapshot")
	}
	got, err := back.Load()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("snapshot policy =\n%+v\nwant\n%+v", got, want)
	}
	if pos := got.RoCE[0].Source.String(); pos != filepath.Join(root, DropInDir, "50-roce.toml")+":3" {
		t.Errorf("rule position = %s", pos)
	}
}

func TestParseSnapshotRefusesForeignOrOddFiles(t *testing.T) {
	for name, data := range map[string]string{
		"no header":     `{"main_file":"/etc/rdma/rdmad.toml","files":[]}`,
		"unknown field": LastGoodHeader + `{"main_file":"/etc/rdma/rdmad.toml","files":[],"x":1}`,
		"elsewhere":     LastGoodHeader + `{"main_file":"/etc/rdma/rdmad.toml","files":[{"name":"/etc/passwd","data":""}]}`,
	} {
		if _, err := ParseSnapshot("f", []byte(data)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// --check-config --with FILE --as NAME: FILE is checked in place of, or
// beside, the drop-ins, under NAME in error messages.
func TestWithFileChecksTheSetAsIfInstalled(t *testing.T) {
	root := t.TempDir()
	main := writeFile(t, root, MainFile, "[[roce]]\ndevice = \"mlx5_0\"\ntos = 1\n")
	writeFile(t, root, DropInDir+"/50-ansible.toml", "[[roce]]\ndevice = \"a\"\ntos = 2\n")
	tmp := writeFile(t, root, "tmp/ansible.xyz", "[[roce]]\ndevice = \"b\"\nmode = \"v3\"\n")
	dir := DropInDirFor(main)
	_, err := Load(WithFile(files, dir, tmp, "50-ansible.toml"), main)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "50-ansible.toml")+":3") {
		t.Errorf("bad replacement: %v", err)
	}
	writeFile(t, root, "tmp/ansible.xyz", "[[roce]]\ndevice = \"b\"\nmode = \"v2\"\n")
	p, err := Load(WithFile(files, dir, tmp, "60-new.toml"), main)
	if err != nil || len(p.RoCE) != 3 || p.RoCE[2].Selector.Device.Name != "b" {
		t.Errorf("added drop-in: %+v, %v", p, err)
	}
	p, err = Load(WithFile(files, dir, tmp, "50-ansible.toml"), main)
	if err != nil || len(p.RoCE) != 2 || p.RoCE[1].Selector.Device.Name != "b" {
		t.Errorf("replaced drop-in: %+v, %v", p, err)
	}
	// No rdmad.d yet: the file is the only drop-in.
	root2 := t.TempDir()
	p, err = Load(WithFile(files, DropInDirFor(filepath.Join(root2, MainFile)), tmp, "50-ansible.toml"), filepath.Join(root2, MainFile))
	if err != nil || len(p.RoCE) != 1 {
		t.Errorf("without rdmad.d: %+v, %v", p, err)
	}
}
