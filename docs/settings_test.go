package docs

import (
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/dcb/dcbtest"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/links/linkstest"
	"github.com/rdmad/rdmad/daemon/netns/netnstest"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// partInfo is one part package: its settings, and the identifiers of the
// handles it declares them with.
type partInfo struct {
	pkg      string // import path
	settings []*reconcile.Setting
	handles  []string
}

// parts lists the packages of rdmad's parts, as the composition root
// builds them, with their settings and handles.
func parts(t *testing.T) []partInfo {
	t.Helper()
	h := host.New(t.TempDir())
	p := compose.Parts(compose.Kernel{Modules: &hosttest.Modprobe{}, Links: &linkstest.Netlink{Host: h},
		Netns: netnstest.New(config.NetnsShared), DCB: dcbtest.New().Kernel()})(h, false, func() {})
	var all []reconcile.Part
	for _, x := range p.Early {
		all = append(all, x)
	}
	for _, x := range p.Host {
		all = append(all, x)
	}
	for _, x := range p.Device {
		all = append(all, x)
	}
	byPkg := map[string]*partInfo{}
	for _, part := range all {
		pkg := reflect.TypeOf(part).Elem().PkgPath()
		info := byPkg[pkg]
		if info == nil {
			info = &partInfo{pkg: pkg, handles: handleNames(t, "../"+pkg[len(module):])}
			byPkg[pkg] = info
		}
		info.settings = append(info.settings, part.Settings()...)
	}
	var out []partInfo
	for _, info := range byPkg {
		out = append(out, *info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pkg < out[j].pkg })
	return out
}

// handleNames are the package-level variables of dir declared with
// reconcile.NewSetting: the settings' handles.
func handleNames(t *testing.T, dir string) []string {
	t.Helper()
	fset := gotoken.NewFileSet()
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	var out []string
	for _, file := range files {
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != gotoken.VAR {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, v := range vs.Values {
					call, ok := v.(*ast.CallExpr)
					if !ok {
						continue
					}
					fn := call.Fun
					if ix, ok := fn.(*ast.IndexExpr); ok {
						fn = ix.X
					}
					if sel, ok := fn.(*ast.SelectorExpr); ok && sel.Sel.Name == "NewSetting" && i < len(vs.Names) {
						out = append(out, vs.Names[i].Name)
					}
				}
			}
		}
	}
	return out
}
