package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rdmad/rdmad/cmd/rdmactl/internal/capture"
)

func init() { register("", captureCommand) }

func captureCommand(e *env) *cobra.Command {
	var file, root string
	var raw bool
	c := &cobra.Command{
		Use:   "capture [-o FILE] [--root DIR] [--raw]",
		Short: "Write this host as a fixture host, to send or to test against",
		Long: `Write what rdmad and rdmactl doctor read of this host into one compressed
tarball that is a fixture host: rdmad --root on the unpacked tree sees the
same devices, ports and values, and doctor gives the same findings. It
holds the RDMA devices with their ports, GID tables and counters, their
PCI functions and netdevs, configfs rdma_cm, /proc/modules, /etc/rdma,
the limits, modprobe and systemd files doctor judges, /etc/libibverbs.d,
and the netdevs' DCB and ethtool state (fixture/kernel.json). It reads the
host itself, not through rdmad, and needs root on the host (--root DIR
captures a fixture tree). MAC and IP addresses, GIDs, GUIDs, the host's
name and serial numbers are replaced, each consistently (a GID still
matches its netdev); --raw keeps them. Files that are not files (a FIFO,
a device, a symlink loop) are skipped and listed. For this command -o
names the file (- for standard output); -j prints the summary as JSON.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if e.host != "" {
				return usagef(cmd, "capture reads the host it runs on, not over -H: run it there (ssh HOST sudo rdmactl capture -o - > HOST.tar.gz)")
			}
			return e.capture(file, root, raw)
		},
	}
	f := c.Flags()
	// The same name as the global -o: for capture it is the file.
	f.StringVarP(&file, "output", "o", "", "write the capture to `FILE` (- for standard output; default rdmad-capture-DATE-TIME.tar.gz here)")
	f.StringVar(&root, "root", "/", "capture the fixture tree at `DIR` instead of this host")
	f.BoolVar(&raw, "raw", false, "keep the host's addresses, GIDs, GUIDs, name and serial numbers")
	_ = c.MarkFlagDirname("root")
	return c
}

// captureReport is capture's JSON summary.
type captureReport struct {
	File       string         `json:"file"`
	Bytes      int64          `json:"bytes"`
	Files      int            `json:"files"`
	Links      int            `json:"links"`
	Dirs       int            `json:"directories"`
	Anonymised bool           `json:"anonymised"`
	Replaced   map[string]int `json:"replaced"`
	Skipped    []capture.Skip `json:"skipped"`
	Unreadable int            `json:"unreadable"`
}

func (e *env) capture(file, root string, raw bool) error {
	now := time.Now()
	if file == "" {
		file = "rdmad-capture-" + now.Format("20060102-150405") + ".tar.gz"
	}
	dir := "rdmad-capture"
	if file != "-" {
		dir = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(filepath.Base(file), ".gz"), ".tar"), ".tgz")
	}
	o := capture.Options{Root: root, Dir: dir, Raw: raw, Now: now}
	var res *capture.Result
	var size int64
	var err error
	if file == "-" {
		w := &countWriter{w: e.stdout}
		res, err = capture.Write(w, o)
		size = w.n
	} else {
		res, size, err = writeCapture(file, o)
	}
	if err != nil {
		return failf("%v", err) // the capture's own words: no rdmad was asked
	}
	rep := captureReport{File: file, Bytes: size, Files: res.Files, Links: res.Links, Dirs: res.Dirs,
		Anonymised: !raw, Replaced: map[string]int{}, Skipped: res.Skipped, Unreadable: res.Unreadable}
	for _, r := range res.Map {
		rep.Replaced[r.Kind]++
	}
	if rep.Skipped == nil {
		rep.Skipped = []capture.Skip{}
	}
	out := e.stdout
	if file == "-" {
		out = e.stderr // the tarball is on standard output
	}
	if e.jsonMode() != "" {
		doc, err := json.Marshal(escaped(rep))
		if err != nil {
			return err
		}
		save := e.stdout
		e.stdout = out
		defer func() { e.stdout = save }()
		return e.printDoc("", doc)
	}
	printCapture(out, escaped(rep))
	return nil
}

// printCapture is the summary for a person.
func printCapture(w io.Writer, r captureReport) {
	fmt.Fprintf(w, "wrote %s: %d files, %d links, %d directories, %s\n", r.File, r.Files, r.Links, r.Dirs, sizeText(r.Bytes))
	if r.Anonymised {
		var parts []string
		for _, k := range []struct{ kind, one, many string }{
			{capture.KindMAC, "MAC address", "MAC addresses"}, {capture.KindIPv4, "IPv4 address", "IPv4 addresses"},
			{capture.KindPrefix, "IPv6 prefix", "IPv6 prefixes"}, {capture.KindGUID, "GUID", "GUIDs"},
			{capture.KindHostname, "host name", "host names"}, {capture.KindSerial, "serial number", "serial numbers"},
		} {
			switch n := r.Replaced[k.kind]; {
			case n == 1:
				parts = append(parts, "1 "+k.one)
			case n > 1:
				parts = append(parts, fmt.Sprintf("%d %s", n, k.many))
			}
		}
		what := "nothing"
		if len(parts) > 0 {
			what = strings.Join(parts, ", ")
		}
		fmt.Fprintf(w, "replaced: %s (--raw keeps them)\n", what)
	} else {
		fmt.Fprintln(w, "raw: the host's addresses, GIDs, GUIDs, name and serial numbers are in it")
	}
	switch {
	case r.Unreadable == 1:
		fmt.Fprintln(w, "1 attribute answered an error and is empty in it, as rdmad reads it")
	case r.Unreadable > 1:
		fmt.Fprintf(w, "%d attributes answered an error and are empty in it, as rdmad reads them\n", r.Unreadable)
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(w, "skipped %s: %s\n", s.Path, s.Why)
	}
}

func sizeText(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%.1f KB", float64(n)/1e3)
	}
	return fmt.Sprintf("%.1f MB", float64(n)/1e6)
}

// writeCapture writes the capture to file atomically (a temporary file
// beside it, renamed over it once whole): readable by others when
// anonymised, by its owner only when raw.
func writeCapture(file string, o capture.Options) (*capture.Result, int64, error) {
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".tmp-")
	if err != nil {
		return nil, 0, fmt.Errorf("write %s: %w", file, err)
	}
	defer os.Remove(tmp.Name())
	w := &countWriter{w: tmp}
	res, err := capture.Write(w, o)
	if err != nil {
		tmp.Close()
		return nil, 0, err
	}
	mode := os.FileMode(0o644)
	if o.Raw {
		mode = 0o600
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return nil, 0, fmt.Errorf("write %s: %w", file, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, 0, fmt.Errorf("write %s: %w", file, err)
	}
	if err := tmp.Close(); err != nil {
		return nil, 0, fmt.Errorf("write %s: %w", file, err)
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return nil, 0, fmt.Errorf("write %s: %w", file, err)
	}
	return res, w.n, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
