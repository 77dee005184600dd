// Package capture is `rdmactl capture`: it writes a host as a fixture host
// (a tree rdmad --root reads as it reads the host) into one compressed
// tarball. It holds what rdmad and its doctor read: the RDMA devices with
// their ports, GID tables and counters, their PCI functions and netdevs,
// configfs rdma_cm, the module lists and the files rdmad manages, the
// files doctor judges, and the netdevs' DCB and ethtool state in
// fixture/kernel.json (docs/fixtures.md). It reads the host itself, as
// rdmactl verify does, not through rdmad: a host whose rdmad does not run
// (or is not installed) is the one a site most needs to send.
//
// Every file is read with rdmad's bounded readers (daemon/host): regular
// files only, opened without blocking, size-capped, so a FIFO, an endless
// device or a symlink loop is skipped, named, and never wedges the
// capture. Identifiers are replaced unless Options.Raw (anon.go).
// docs/support.md ("Send us your host") is the user's page of it.
package capture

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/rdmad/rdmad/daemon/fixturekernel"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/version"
)

// Options says what to capture and how.
type Options struct {
	// Root is the host's root: "/" for the host rdmactl runs on (root
	// only), a fixture tree otherwise.
	Root string
	// Dir is the directory the tarball's entries are under ("" for none).
	Dir string
	// Raw keeps the host's identifiers.
	Raw bool
	// Kernel reads the netdevs' DCB and ethtool state. nil: the real
	// codecs on "/", and a fixture's own fixture/kernel.json under
	// another root.
	Kernel *Kernel
	// Now is the capture's date (the manifest's, and the time of the
	// entries that have none of their own); zero: time.Now.
	Now time.Time
}

// Result says what a capture holds.
type Result struct {
	Files, Links, Dirs int
	// Read is the bytes of the files written (before compression).
	Read int64
	// Skipped are the paths left out, with why (a FIFO, too large, a
	// symlink loop, a link out of the root).
	Skipped []Skip
	// Unreadable counts the files that exist but did not read (an
	// attribute answering EINVAL): each is in the capture as an empty
	// file, as rdmad reads it.
	Unreadable int
	// Map is every identifier replaced (nil with Raw). It is not in the
	// tarball.
	Map  []Replacement
	anon *anonymiser
}

// Text is s, a text about the captured host (rdmad's report, doctor's
// findings), with the capture's replacements: what the same text about the
// capture reads.
func (r *Result) Text(s string) string {
	if r.anon == nil {
		return s
	}
	return r.anon.Text(s)
}

// Skip is a path the capture left out, relative to the root.
type Skip struct {
	Path string `json:"path"`
	Why  string `json:"why"`
}

// The capture's own files in the tree, beside the fixture's kernel state.
const (
	// ManifestFile says what was captured, by which rdmactl, when, and
	// what was left out; never from where.
	ManifestFile = fixturekernel.Dir + "/capture.json"
)

// Bounds of one capture, far above any host's: a tree past them is not a
// host (a loop of bind mounts, a directory of millions of entries), and the
// capture stops there with an error instead of filling the disk.
const (
	maxEntries   = 2_000_000
	maxReadBytes = 1 << 30
	maxDepth     = 12 // directories walked below a captured tree's top
	maxListed    = 100_000
)

// ErrNotRoot is a capture of the running host by a user other than root:
// DCB netlink, hardware counters and root-only files would be missing and
// the capture would show a different host.
var ErrNotRoot = errors.New("capturing this host needs root: DCB and ethtool state, hardware counters and root-only files are read as root (sudo rdmactl capture, or --root DIR for a fixture tree)")

// Write captures the host at o.Root into w as a gzip-compressed tar.
// Problems with single files are in Result.Skipped; an error is a capture
// that could not be made (not root, the root not a directory, w failing).
func Write(w io.Writer, o Options) (*Result, error) {
	if o.Root == "" {
		o.Root = "/"
	}
	root, err := filepath.Abs(o.Root)
	if err != nil {
		return nil, fmt.Errorf("capture %s: %w", o.Root, err)
	}
	if st, err := os.Stat(root); err != nil || !st.IsDir() {
		var pe *fs.PathError
		switch {
		case err == nil:
			err = syscall.ENOTDIR
		case errors.As(err, &pe):
			err = pe.Err
		}
		return nil, fmt.Errorf("capture %s: %w", o.Root, err)
	}
	if root == "/" && os.Geteuid() != 0 {
		return nil, ErrNotRoot
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
	c := &capturer{o: o, root: root, h: host.New(root), tw: tar.NewWriter(zw), res: &Result{},
		emitted: map[string]bool{}, seen: map[string]bool{}, names: map[string]string{}}
	if !o.Raw {
		c.anon = newAnonymiser(c.hostnames())
		c.res.anon = c.anon
	}
	c.run()
	if c.err == nil {
		c.manifest()
	}
	if c.err == nil {
		c.err = c.tw.Close()
	}
	if c.err == nil {
		c.err = zw.Close()
	}
	if c.err != nil {
		return nil, c.err
	}
	if c.anon != nil {
		c.res.Map = c.anon.Map()
	}
	return c.res, nil
}

// capturer is one capture under way.
type capturer struct {
	o    Options
	root string
	h    *host.Host
	tw   *tar.Writer
	anon *anonymiser
	res  *Result
	err  error // the first error that stops the capture

	emitted map[string]bool // entries written, by path in the tarball
	seen    map[string]bool // source paths handled (a directory walked once)
	names   map[string]string
}

// run captures everything: the kernel's trees, then the host's files, then
// the DCB and ethtool state. Replacements are numbered in the order their
// identifiers are met.
func (c *capturer) run() {
	c.infiniband()
	c.netdevs()
	c.verbs()
	c.configfs()
	c.modules()
	c.hostFiles()
	c.kernelState()
}

// abs is the path of rel on this machine.
func (c *capturer) abs(rel string) string {
	if rel == "" {
		return c.root
	}
	return filepath.Join(c.root, filepath.FromSlash(rel))
}

// skip records that rel was left out.
func (c *capturer) skip(rel string, err error) {
	c.res.Skipped = append(c.res.Skipped, Skip{Path: "/" + c.out(rel), Why: c.why(err)})
}

// why is err as the manifest says it: without this machine's path of the
// root, whose name says nothing of the host and may say something of the
// user who ran the capture.
func (c *capturer) why(err error) string {
	s := err.Error()
	if c.root != "/" {
		s = strings.ReplaceAll(s, c.root+"/", "/")
	}
	if c.anon != nil {
		s = c.anon.Text(s)
	}
	return s
}

// out is the path of rel in the tarball, without Dir: its names
// anonymised.
func (c *capturer) out(rel string) string {
	if c.anon == nil {
		return rel
	}
	return c.anon.scrubPath(rel)
}

// full is the entry name of rel (remembered: each entry's parents are
// named again for each of their entries).
func (c *capturer) full(rel string) string {
	if name, ok := c.names[rel]; ok {
		return name
	}
	name := c.out(rel)
	if c.o.Dir != "" {
		name = path.Join(c.o.Dir, name)
	}
	c.names[rel] = name
	return name
}

// header writes one entry's header, its parent directories first.
func (c *capturer) header(rel string, hdr *tar.Header) bool {
	if c.err != nil {
		return false
	}
	name := c.full(rel)
	if c.emitted[name] {
		return false
	}
	if dir := path.Dir(rel); dir != "." && dir != "" {
		c.dir(dir)
	} else if c.o.Dir != "" && !c.emitted[c.o.Dir] {
		c.emitted[c.o.Dir] = true
		c.write(&tar.Header{Typeflag: tar.TypeDir, Name: c.o.Dir + "/", Mode: 0o755, ModTime: c.o.Now.Truncate(time.Second)})
	}
	if len(c.emitted) >= maxEntries {
		c.err = fmt.Errorf("capture stopped at %d entries: the tree under %s is larger than any host's", maxEntries, c.o.Root)
		return false
	}
	c.emitted[name] = true
	hdr.Name = name
	if hdr.ModTime.IsZero() {
		// Whole seconds: a time of its own (a file's, kept to the
		// nanosecond: doctor compares two) makes the entry a PAX one.
		hdr.ModTime = c.o.Now.Truncate(time.Second)
	}
	if hdr.ModTime.Nanosecond() != 0 {
		hdr.Format = tar.FormatPAX // else rounded to the second
	}
	c.write(hdr)
	return c.err == nil
}

func (c *capturer) write(hdr *tar.Header) {
	hdr.Uid, hdr.Gid = 0, 0
	if err := c.tw.WriteHeader(hdr); err != nil && c.err == nil {
		c.err = fmt.Errorf("write the capture: %w", err)
	}
}

// dir writes the directory rel (and its parents), with the capture's
// time: nothing reads a directory's.
func (c *capturer) dir(rel string) {
	if rel == "" || rel == "." || c.emitted[c.full(rel)] {
		return
	}
	if c.header(rel, &tar.Header{Typeflag: tar.TypeDir, Mode: 0o755}) {
		c.res.Dirs++
	}
}

// file writes the regular file rel with data, scrubbed. Its mode keeps
// the source's permission bits without write for group and others (an
// unpacked capture is then trusted by rdmad --root as its user's tree).
func (c *capturer) file(rel string, data []byte, perm fs.FileMode, mtime time.Time) {
	if c.anon != nil && !identifierFree(rel) {
		data = c.anon.scrub(data)
	}
	if c.res.Read+int64(len(data)) > maxReadBytes {
		c.err = fmt.Errorf("capture stopped at %d bytes read: the tree under %s is larger than any host's", maxReadBytes, c.o.Root)
		return
	}
	if perm == 0 {
		perm = 0o644
	}
	if !c.header(rel, &tar.Header{Typeflag: tar.TypeReg, Mode: int64(perm.Perm() &^ 0o022), Size: int64(len(data)), ModTime: mtime}) {
		return
	}
	if _, err := c.tw.Write(data); err != nil && c.err == nil {
		c.err = fmt.Errorf("write the capture: %w", err)
	}
	c.res.Files++
	c.res.Read += int64(len(data))
}

// identifierFree are files of the distribution that name no host (the
// kernel's module indexes, the services list, os-release): they are kept
// as they are, so nothing in them that looks like an address changes.
func identifierFree(rel string) bool {
	switch {
	case strings.HasPrefix(rel, "lib/modules/") || strings.HasPrefix(rel, "usr/lib/modules/"):
		return true
	case rel == "etc/services" || rel == "etc/os-release" || rel == "usr/lib/os-release":
		return true
	}
	return false
}

// link writes the symlink rel to target, made relative to rel's directory
// when it is absolute, so the tree works wherever it is unpacked.
// /dev/null stays as it is: it is how systemd masks a unit. A link whose
// target leaves the root is not written.
func (c *capturer) link(rel, target string) bool {
	t, err := relativeTarget(rel, target)
	if err != nil {
		c.skip(rel, err)
		return false
	}
	if c.anon != nil {
		t = c.anon.scrubPath(t)
	}
	if c.header(rel, &tar.Header{Typeflag: tar.TypeSymlink, Linkname: t, Mode: 0o777}) {
		c.res.Links++
		return true
	}
	return false
}

// errLeavesRoot is a link that points above the root.
var errLeavesRoot = errors.New("its target is outside the host's root")

func relativeTarget(rel, target string) (string, error) {
	if target == "/dev/null" {
		return target, nil
	}
	dir := path.Dir(rel)
	if path.IsAbs(target) {
		to := strings.TrimPrefix(path.Clean(target), "/")
		up := strings.Repeat("../", strings.Count(dir, "/")+1)
		if dir == "." {
			up = ""
		}
		if to == "" {
			to = "."
		}
		return up + to, nil
	}
	if j := path.Join(dir, target); j == ".." || strings.HasPrefix(j, "../") {
		return "", fmt.Errorf("link to %s: %w", target, errLeavesRoot)
	}
	return target, nil
}

// manifest writes ManifestFile.
func (c *capturer) manifest() {
	type unreadable struct {
		Count int `json:"count"`
	}
	m := struct {
		Rdmactl    string     `json:"rdmactl"`
		Date       string     `json:"date"`
		Anonymised bool       `json:"anonymised"`
		Kernel     string     `json:"kernel,omitempty"`
		Skipped    []Skip     `json:"skipped"`
		Unreadable unreadable `json:"unreadable"`
	}{Rdmactl: version.Version, Date: c.o.Now.UTC().Format("2006-01-02"), Anonymised: !c.o.Raw,
		Skipped: c.res.Skipped, Unreadable: unreadable{c.res.Unreadable}}
	if m.Skipped == nil {
		m.Skipped = []Skip{}
	}
	sort.SliceStable(m.Skipped, func(i, j int) bool { return m.Skipped[i].Path < m.Skipped[j].Path })
	if rel, err := c.h.ReadString(host.ProcOSRelease); err == nil {
		m.Kernel = strings.TrimSpace(rel)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		c.err = err
		return
	}
	// Written as it is: nothing in it is the host's but what was scrubbed
	// already (the skipped paths and reasons).
	anon := c.anon
	c.anon = nil
	c.file(ManifestFile, append(b, '\n'), 0o644, c.o.Now)
	c.anon = anon
}
