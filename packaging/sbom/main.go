// Command sbom writes the CycloneDX software bill of materials of rdmad's
// source tarball (`make dist`): rdmad itself and every Go module vendored
// with it, each with its version, package URL, the SHA-256 of go.sum's
// module hash, its licence (from the module's own licence file), whether the
// shipped binaries link it, and the module dependencies its packages' imports
// make. It runs in the tree `go mod vendor` has filled and reads only that
// tree (and `go list`, which answers from vendor/ offline), so the same
// tarball always gives the same document.
//
//	go run ./packaging/sbom -version 1.0.0 -o rdmad-1.0.0.cdx.json
package main

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The binaries a package ships: the modules they link are "required".
var shipped = []string{"./cmd/rdmad", "./cmd/rdmactl"}

const mainModule = "github.com/rdmad/rdmad"

func main() {
	dir := flag.String("dir", ".", "the module root, with vendor/ filled by go mod vendor")
	version := flag.String("version", "", "rdmad's version (packaging/version.sh)")
	out := flag.String("o", "", "output file (default standard output)")
	flag.Parse()
	if *version == "" {
		fmt.Fprintln(os.Stderr, "sbom: -version is required")
		os.Exit(2)
	}
	bom, err := build(*dir, *version)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sbom:", err)
		os.Exit(1)
	}
	data, err := json.MarshalIndent(bom, "", "  ")
	if err != nil {
		fmt.Fprintln(os.Stderr, "sbom:", err)
		os.Exit(1)
	}
	data = append(data, '\n')
	if *out == "" {
		_, err = os.Stdout.Write(data)
	} else {
		err = os.WriteFile(*out, data, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sbom:", err)
		os.Exit(1)
	}
}

// BOM is the part of CycloneDX 1.5 (https://cyclonedx.org/docs/1.5/json/)
// this document uses.
type BOM struct {
	BOMFormat    string       `json:"bomFormat"`
	SpecVersion  string       `json:"specVersion"`
	SerialNumber string       `json:"serialNumber"`
	Version      int          `json:"version"`
	Metadata     Metadata     `json:"metadata"`
	Components   []Component  `json:"components"`
	Dependencies []Dependency `json:"dependencies"`
}

// Metadata says when and of what the BOM is.
type Metadata struct {
	Timestamp string    `json:"timestamp"`
	Component Component `json:"component"`
}

// Component is rdmad or one module.
type Component struct {
	Type       string     `json:"type"`
	BOMRef     string     `json:"bom-ref"`
	Name       string     `json:"name"`
	Version    string     `json:"version"`
	Scope      string     `json:"scope,omitempty"`
	PURL       string     `json:"purl"`
	Hashes     []Hash     `json:"hashes,omitempty"`
	Licenses   []License  `json:"licenses"`
	Properties []Property `json:"properties,omitempty"`
}

// Hash is a digest of a component.
type Hash struct {
	Alg     string `json:"alg"`
	Content string `json:"content"`
}

// License names an SPDX licence.
type License struct {
	License struct {
		ID string `json:"id"`
	} `json:"license"`
}

// Property is a name/value pair of rdmad's own.
type Property struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Dependency lists what one component depends on.
type Dependency struct {
	Ref       string   `json:"ref"`
	DependsOn []string `json:"dependsOn"`
}

// Module is a vendored module.
type Module struct{ Path, Version string }

func purl(path, version string) string { return "pkg:golang/" + path + "@" + version }

func build(dir, version string) (*BOM, error) {
	mods, err := vendored(dir)
	if err != nil {
		return nil, err
	}
	sums, err := goSum(filepath.Join(dir, "go.sum"))
	if err != nil {
		return nil, err
	}
	linked, err := modulesOf(dir, shipped...)
	if err != nil {
		return nil, err
	}
	edges, err := moduleImports(dir)
	if err != nil {
		return nil, err
	}
	epoch := time.Now().Unix()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		if epoch, err = strconv.ParseInt(s, 10, 64); err != nil {
			return nil, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
		}
	}
	self := Component{Type: "application", BOMRef: purl(mainModule, version), Name: "rdmad", Version: version,
		PURL: purl(mainModule, version), Licenses: []License{license("Apache-2.0")}}
	bom := &BOM{BOMFormat: "CycloneDX", SpecVersion: "1.5", SerialNumber: serial(version), Version: 1,
		Metadata: Metadata{Timestamp: time.Unix(epoch, 0).UTC().Format(time.RFC3339), Component: self}}
	refOf := map[string]string{mainModule: self.BOMRef}
	for _, m := range mods {
		refOf[m.Path] = purl(m.Path, m.Version)
	}
	for _, m := range mods {
		lic, err := ModuleLicense(filepath.Join(dir, "vendor", filepath.FromSlash(m.Path)))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.Path, err)
		}
		c := Component{Type: "library", BOMRef: refOf[m.Path], Name: m.Path, Version: m.Version, PURL: refOf[m.Path],
			Licenses: []License{license(lic)}, Scope: "optional",
			Properties: []Property{{Name: "rdmad:linked", Value: strconv.FormatBool(linked[m.Path])}}}
		if linked[m.Path] {
			c.Scope = "required"
		}
		h, ok := sums[m.Path+" "+m.Version]
		if !ok {
			return nil, fmt.Errorf("%s %s: no hash in go.sum", m.Path, m.Version)
		}
		c.Hashes = []Hash{{Alg: "SHA-256", Content: h}}
		bom.Components = append(bom.Components, c)
	}
	for _, from := range append([]string{mainModule}, keys(refOf, mainModule)...) {
		d := Dependency{Ref: refOf[from], DependsOn: []string{}}
		for _, to := range edges[from] {
			if ref, ok := refOf[to]; ok && to != from {
				d.DependsOn = append(d.DependsOn, ref)
			}
		}
		sort.Strings(d.DependsOn)
		bom.Dependencies = append(bom.Dependencies, d)
	}
	return bom, nil
}

func keys(m map[string]string, except string) []string {
	var out []string
	for k := range m {
		if k != except {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func license(id string) License {
	var l License
	l.License.ID = id
	return l
}

// serial is a name-based (version 5) UUID of rdmad's version, so the same
// release always has the same serial number.
func serial(version string) string {
	h := sha1.Sum([]byte("rdmad source " + version))
	h[6] = h[6]&0x0f | 0x50
	h[8] = h[8]&0x3f | 0x80
	x := hex.EncodeToString(h[:16])
	return "urn:uuid:" + x[:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

// vendored reads vendor/modules.txt: "# path version" for each module.
func vendored(dir string) ([]Module, error) {
	f, err := os.Open(filepath.Join(dir, "vendor", "modules.txt"))
	if err != nil {
		return nil, fmt.Errorf("%w (run go mod vendor first)", err)
	}
	defer f.Close()
	var mods []Module
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 3 && fields[0] == "#" && !strings.HasPrefix(fields[1], "#") {
			if len(fields) > 3 && fields[3] == "=>" {
				return nil, fmt.Errorf("vendor/modules.txt: %s is replaced; the SBOM does not describe replacements", fields[1])
			}
			mods = append(mods, Module{Path: fields[1], Version: fields[2]})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(mods) == 0 {
		return nil, fmt.Errorf("vendor/modules.txt names no module")
	}
	return mods, nil
}

// goSum maps "path version" to the hex SHA-256 of go.sum's h1: hash of the
// module's content.
func goSum(name string) (map[string]string, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || strings.HasSuffix(f[1], "/go.mod") || !strings.HasPrefix(f[2], "h1:") {
			continue
		}
		sum, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(f[2], "h1:"))
		if err != nil || len(sum) != 32 {
			return nil, fmt.Errorf("go.sum: bad hash for %s %s", f[0], f[1])
		}
		out[f[0]+" "+f[1]] = hex.EncodeToString(sum)
	}
	return out, nil
}

type listed struct {
	ImportPath string
	Module     *struct{ Path string }
	Imports    []string
}

// goList runs go list -json over patterns in dir, from vendor/ and offline.
func goList(dir string, args ...string) ([]listed, error) {
	cmd := exec.Command("go", append([]string{"list", "-mod=vendor", "-e", "-json=ImportPath,Module,Imports"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=vendor")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	var pkgs []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p listed
		if err := dec.Decode(&p); err != nil {
			return nil, err
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}

// modulesOf is the set of modules the packages link (their dependencies').
func modulesOf(dir string, pkgs ...string) (map[string]bool, error) {
	list, err := goList(dir, append([]string{"-deps"}, pkgs...)...)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, p := range list {
		if p.Module != nil && p.Module.Path != mainModule {
			out[p.Module.Path] = true
		}
	}
	return out, nil
}

// moduleImports is the module graph the code makes: module A depends on
// module B when a package of A (tests included, for rdmad's own) imports a
// package of B.
func moduleImports(dir string) (map[string][]string, error) {
	list, err := goList(dir, "-deps", "-test", "./...")
	if err != nil {
		return nil, err
	}
	modOf := map[string]string{}
	for _, p := range list {
		if p.Module != nil {
			modOf[p.ImportPath] = p.Module.Path
		}
	}
	seen := map[[2]string]bool{}
	out := map[string][]string{}
	for _, p := range list {
		if p.Module == nil {
			continue
		}
		for _, imp := range p.Imports {
			to, ok := modOf[imp]
			e := [2]string{p.Module.Path, to}
			if ok && to != p.Module.Path && !seen[e] {
				seen[e] = true
				out[e[0]] = append(out[e[0]], to)
			}
		}
	}
	return out, nil
}
