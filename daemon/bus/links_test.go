package bus_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/links/linkstest"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
	"github.com/rdmad/rdmad/test/bustest"
)

// linksEnv is rdmad managing soft links through the fixture link kernel,
// with a netdev whose name is not UTF-8 (published as \xNN).
func linksEnv(t *testing.T, cfg string) (addr, root string, nl *linkstest.Netlink) {
	t.Helper()
	dir := bustest.PublicDir(t)
	addr = privateBus(t, dir)
	root = fixture(t, dir, "mlx5", cfg)
	h := host.New(root)
	if err := linkstest.AddNetdev(h, "et\xffh1"); err != nil {
		t.Fatal(err)
	}
	nl = &linkstest.Netlink{Host: h}
	conn, err := dbusapi.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	startDaemonLinks(t, conn, h, nl)
	return addr, root, nl
}

// publishedLinks is Manager.Links as "name type netdev" lines.
func publishedLinks(t *testing.T, c *client.Client) []string {
	t.Helper()
	var out []string
	for _, l := range managerProp(t, c.Conn(), "Links").([][]any) {
		out = append(out, l[0].(string)+" "+l[1].(string)+" "+l[2].(string))
	}
	return out
}

// Link and netdev names are published escaped; a client that passes a
// published name back to AddLink or DeleteLink reaches that link, not one
// named by the escaped spelling.
func TestLinkNamesAreTakenAsPublished(t *testing.T) {
	addr, _, nl := linksEnv(t, mlx5Config+"\n[[link]]\nname = 'rx\\e0'\ntype = \"rxe\"\nnetdev = \"ens1f0np0\"\n")
	c, err := client.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := publishedLinks(t, c); !slices.Equal(got, []string{`rx\\e0 rxe ens1f0np0`}) {
		t.Fatalf("setup: Links = %q", got)
	}
	if err := c.DeleteLink(t.Context(), `rx\\e0`, false); err != nil {
		t.Errorf("DeleteLink by the published name: %v", err)
	}
	if got := publishedLinks(t, c); len(got) != 0 {
		t.Errorf("Links after DeleteLink = %q", got)
	}

	// A name and a netdev a client can only spell escaped.
	if err := c.AddLink(t.Context(), `rxe\xff`, "rxe", `et\xffh1`, false); err != nil {
		t.Fatalf("AddLink with escaped names: %v", err)
	}
	if got := publishedLinks(t, c); !slices.Equal(got, []string{`rxe\xff rxe et\xffh1`}) {
		t.Errorf("Links = %q, want the names as passed", got)
	}
	if err := c.DeleteLink(t.Context(), `rxe\xff`, false); err != nil {
		t.Errorf("DeleteLink by the published name: %v", err)
	}
	want := []string{"del rx\\e0", "add rxe\xff rxe et\xffh1", "del rxe\xff"}
	if got := nl.Calls(); !slices.Equal(got[len(got)-3:], want) {
		t.Errorf("kernel calls %q, want them to end with %q", got, want)
	}
}

// An escape that unescapes to a byte a link or netdev name cannot hold is
// refused like the byte itself: InvalidArgs naming the argument, nothing
// touched.
func TestEscapedInvalidLinkNamesAreInvalidArgs(t *testing.T) {
	addr, root, nl := linksEnv(t, mlx5Config)
	conn := dialT(t, addr)
	obj := conn.Object(dbusapi.BusName, dbusapi.RootPath)
	before := treeDigest(t, root)
	calls := len(nl.Calls())
	for _, tc := range []struct {
		method string
		args   []any
		arg    string
		msg    string // in the message, when set
		name   string // the error's name; "": InvalidArgs
	}{
		{"AddLink", []any{`a\x2fb`, "rxe", "ens1f0np0", false}, "name", "", ""},
		{"AddLink", []any{`rxe\x0a`, "rxe", "ens1f0np0", true}, "name", "", ""},
		{"AddLink", []any{"rxe1", "rxe", `ens1\x3a0`, false}, "netdev", "", ""},
		{"AddLink", []any{"rxe1", "rxe", `ens1\x00`, false}, "netdev", "", ""},
		{"DeleteLink", []any{`rxe\x00`, false}, "name", "", ""},
		{"DeleteLink", []any{`..\x2f..`, true}, "name", "", ""},
		// Not UTF-8: fine at runtime, not in the TOML drop-in. The
		// message spells the name as it was sent, to be pasted back.
		{"AddLink", []any{`rxe\xff`, "rxe", "ens1f0np0", true}, "name", `"rxe\xff" is not UTF-8`, ""},
		{"AddLink", []any{"rxe1", "rxe", `ens1\xfe`, true}, "netdev", `"ens1\xfe" is not UTF-8`, ""},
		{"AddLink", []any{"rxe1", "rxe", `ens1\xc2\x9b`, false}, "netdev", `no network interface "ens1\xc2\x9b"`, dbusapi.ErrNoSuchDevice},
	} {
		err := obj.Call(dbusapi.ManagerIface+"."+tc.method, 0, tc.args...).Err
		if err == nil {
			t.Errorf("%s%q was accepted", tc.method, tc.args)
			continue
		}
		want := tc.name
		if want == "" {
			want = dbusapi.ErrInvalidArgs
		}
		if client.ErrorName(err) != want || !strings.Contains(client.ErrorMessage(err), "argument "+tc.arg+":") {
			t.Errorf("%s%q: %s %q, want %s naming %s", tc.method, tc.args, client.ErrorName(err), client.ErrorMessage(err), want, tc.arg)
		}
		if !strings.Contains(client.ErrorMessage(err), tc.msg) {
			t.Errorf("%s%q: message %q, want it to hold %s", tc.method, tc.args, client.ErrorMessage(err), tc.msg)
		}
	}
	if after := treeDigest(t, root); after != before {
		t.Errorf("refused calls changed files:\n%s", diffLines(before, after))
	}
	if got := nl.Calls(); len(got) != calls {
		t.Errorf("refused calls reached the kernel: %q", got[calls:])
	}
}
