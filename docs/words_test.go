package docs

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// outsideReference is one kind of reference to something a reader of
// rdmad's repository, tarball or packages does not have: the tracker and
// planning notes the project was built from. Each says what to write instead.
type outsideReference struct {
	pattern *regexp.Regexp
	instead string
}

var outsideReferences = []outsideReference{
	{regexp.MustCompile(`(?i)\bissues?[ -]?#?[0-9]+`),
		"say what the rule is and why in rdmad's own terms (a decision record under docs/decisions/ holds the longer reasoning); another project's tracker stays allowed when named with the project: owner/repo#N or its URL"},
	{regexp.MustCompile(`(?:^|[\s(\[])#[0-9]{1,5}\b`),
		"a bare #N is an issue number: say what it was about, or name the other project (owner/repo#N)"},
	{regexp.MustCompile(`(?i)\b(?:live-truth|health-gate|governance|house|resilience|lossless|companion)\s+issues?\b`),
		"name the feature or the rule (\"the [drift] table\", \"doctor's [[expect]] rules\"), not the piece of work that brought it"},
	{regexp.MustCompile(`DESIGN\.md`),
		"the design notes are not shipped: cite docs/architecture.md, a man page or a record under docs/decisions/, or state the rule where it is used"},
	{regexp.MustCompile(`(?i)(?:\.\./shared|shared[/]seeds|/work/(?:shared|helpers|main|wt)\b)`),
		"paths outside the repository mean nothing to a reader: name the document itself (\"the RHEL 8 InfiniBand and RDMA networking guide\") or the file in this repository"},
	{regexp.MustCompile(`(?i)(?:\bthe seeds\b|\(seeds?:|\bseeds? [0-9]{3}\b)`),
		"the seed guides are not shipped: name the guide itself (\"RHEL 8 §3\", \"NVIDIA's RDMA/RoCE guide\")"},
}

// allowedReference is a match that names another project's tracker with
// the project: a URL of it, or owner/repo#N, owner/repo issue N.
var allowedReference = regexp.MustCompile(`(?i)(?:https?://\S*(?:/issues/|/pull/|/-/issues/|bugs?\.|bugzilla)\S*|[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+(?:#[0-9]+|\s+issues?\s+#?[0-9]+))`)

// issueAtEnd and commentLead join a reference broken over two lines.
var (
	issueAtEnd  = regexp.MustCompile(`(?i)\bissues?$`)
	commentLead = regexp.MustCompile(`^\s*(?://|#|\*|--)?\s*`)
)

// hexColour is a CSS colour (#444, #151515), not an issue number.
var hexColour = regexp.MustCompile(`#[0-9a-fA-F]{3,8};`)

// projectFiles lists the files of the source tree: what git tracks, or, in a
// source tarball without .git, every file except the vendored modules and
// build output.
func projectFiles(t *testing.T, root string) []string {
	t.Helper()
	if out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output(); err == nil && len(out) > 0 {
		return strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	}
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == ".git" && !d.IsDir() {
			return nil // a worktree's .git file names where its repository is
		}
		if d.IsDir() {
			switch rel {
			case ".git", "vendor", "bin", "dist", ".tools", "debian":
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// findOutsideReferences returns "file:line: text\n  instead: ..." for each
// reference in data.
func findOutsideReferences(name string, data []byte) []string {
	var found []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	line, prev := 0, ""
	for sc.Scan() {
		line++
		text := sc.Text()
		if quiet(text) && quiet(prev) { // as it is, no pattern can match it
			prev = text
			continue
		}
		clean := allowedReference.ReplaceAllString(text, "")
		clean = hexColour.ReplaceAllString(clean, "")
		// "(issue" at the end of one line and "18)" on the next.
		joined := clean
		if m := issueAtEnd.FindString(prev); m != "" {
			joined = m + " " + commentLead.ReplaceAllString(clean, "")
		}
		prev = clean
		for _, r := range outsideReferences {
			m := r.pattern.FindString(clean)
			if m == "" {
				m = r.pattern.FindString(joined)
			}
			if m != "" {
				found = append(found, name+":"+strconv.Itoa(line)+": \""+strings.TrimSpace(m)+"\" in: "+
					strings.TrimSpace(text)+"\n    instead: "+r.instead)
				break
			}
		}
	}
	return found
}

// quiet says that line is ASCII without '#' and without any word each
// pattern needs ("issue", the design document's name, "shared", "/work/", "seed", and
// "://" for allowedReference), case folded: none of the expressions can
// match it, nor its removals make a match. Most lines of the tree are
// quiet; the expressions (slow under -race) run on the others.
func quiet(line string) bool {
	for i := 0; i < len(line); i++ {
		if line[i] >= utf8.RuneSelf || line[i] == '#' { // (?i) folds ſ to s and K to k
			return false
		}
	}
	l := strings.ToLower(line)
	for _, w := range []string{"issue", "design.md", "shared", "/work/", "seed", "://"} {
		if strings.Contains(l, w) {
			return false
		}
	}
	return true
}

// TestNoReferencesOutsideTheProject: rdmad's files (code, comments, docs,
// the Cockpit page, tests) speak of rdmad alone. A reader of the repository,
// the source tarball or the packages has none of the tracker or planning
// notes the project was built from, so a tracker number, a section of the
// design notes or a path to them explains nothing: the rule and its reason belong where the rule
// lives.
func TestNoReferencesOutsideTheProject(t *testing.T) {
	root := ".."
	var found []string
	for _, f := range projectFiles(t, root) {
		// go.sum holds hashes, LICENSE the licence's own words ("issue
		// tracking systems"), this file the forms it looks for.
		if f == "go.sum" || f == "LICENSE" || f == "docs/words_test.go" || strings.HasSuffix(f, ".png") {
			continue
		}
		p := filepath.Join(root, f)
		fi, err := os.Lstat(p)
		if os.IsNotExist(err) { // deleted in the work tree, not yet in git
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if !fi.Mode().IsRegular() { // the fixtures' sysfs symlinks
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.IndexByte(data, 0) >= 0 { // binary
			continue
		}
		found = append(found, findOutsideReferences(f, data)...)
	}
	if len(found) > 0 {
		t.Errorf("%d references to what a reader of rdmad does not have (the tracker, the design notes, paths outside the repository); "+
			"rewrite each in rdmad's own terms, as the line under it says:\n%s", len(found), strings.Join(found, "\n"))
	}
}

// The patterns catch the forms people write and leave other projects'
// trackers, CSS colours and fuzz seed corpora alone.
func TestOutsideReferencePatterns(t *testing.T) {
	// Spelled in parts, so this file does not cite what it looks for.
	tracker, designNotes := "iss"+"ue", "DES"+"IGN.md"
	bad := []string{
		"fixed in " + tracker + " 17",
		"(I" + tracker[1:] + " 19 item 1)",
		"the tree before " + tracker + "s 17-21",
		"see " + tracker + " #20",
		"as " + tracker + "-28 defines it",
		"the live-truth " + tracker + " (plan)",
		"the health-gate " + tracker,
		"fixed by " + designNotes + " §4",
		"vendor notes (`shared" + "/seeds/`)",
		"see .." + "/shared/DESIGN",
		"read /work/helpers/BRIEF",
		"Mixed modes (seeds: a v2 client)",
		"ConnectX-3 (seed 001)",
		"Most users run RHEL-family hosts (the seeds are RHEL guides)",
		"closes #12",
		"// fix (#7)",
		"// No published value shares memory (" + tracker + "\n// 18).",
		"names added by " + tracker + "\n18) for the page",
		"fixed in i\u017f\u017fue 17", // (?i) folds the long s to s
		"SEE ../SHARED/notes",
	}
	for _, s := range bad {
		if got := findOutsideReferences("x", []byte(s)); len(got) < 1 {
			t.Errorf("%q: found %q, want one reference", s, got)
		}
	}
	good := []string{
		"# https://github.com/spf13/cobra/issues/1508",
		"BurntSushi/toml issue #496 makes nested inline tables quadratic",
		"godbus/dbus#374 (the Hello without a context)",
		"    --fg: #151515;",
		"--line: #444;",
		"seed corpus in `daemon/events/testdata/fuzz`",
		"FuzzReadDevice (seed)",
		"manual (RHEL 8 §2)",
		"and issue tracking systems that are managed by",
		"a known issue with mlx5 firmware",
		"# 1 second",
		"echo $# arguments",
		"the same issue\n\nas above",
	}
	for _, s := range good {
		if got := findOutsideReferences("x", []byte(s)); len(got) != 0 {
			t.Errorf("%q: found %q, want nothing", s, got)
		}
	}
}
