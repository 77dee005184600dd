package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/rdmad/rdmad/cmd/rdmactl/internal/verify"
)

func init() { register("", verifyCommand) }

func verifyCommand(e *env) *cobra.Command {
	var size, timeout string
	var minBW float64
	var root string
	c := &cobra.Command{
		Use:   "verify [--size SIZE] [--timeout DUR] [--min-bandwidth GBPS] [DEV[/PORT]...]",
		Short: "Check that RDMA works for the user who runs it",
		Long: `Check that RDMA works for the calling user on this host, with no call to
rdmad and no root: the locked-memory limit (RLIMIT_MEMLOCK) against SIZE
first, then for each ACTIVE port (or the ports named) access to its
user-verbs device, SIZE bytes moved each way over a reliable connection
with a registered buffer of SIZE (ibv_rc_pingpong), an RDMA-CM connection
on Ethernet ports (rping, the path a declared RoCE TOS applies to) and,
with --min-bandwidth, the RDMA write bandwidth (ib_write_bw). The tools run
as server and client on this host, within --timeout a port; they come
from ibverbs-utils, rdmacm-utils and perftest. Each step is printed with
its time and, when it fails, its cause and fix. Exits 0 when every step
passes, 1 otherwise, 2 for a bad argument.`,
		Args: func(*cobra.Command, []string) error { return nil },
		RunE: func(cmd *cobra.Command, args []string) error {
			if e.host != "" {
				return usagef(cmd, "verify runs as the calling user on this host, not over -H: run it there (ssh HOST rdmactl verify)")
			}
			o := verify.Options{Targets: args, MinBandwidth: minBW, Root: root}
			var err error
			if o.Size, err = verify.ParseSize(size); err != nil {
				return usagef(cmd, "--size %v", err)
			}
			if o.Timeout, err = time.ParseDuration(timeout); err != nil || o.Timeout <= 0 {
				return usagef(cmd, "--timeout %q: want a duration such as 10s", timeout)
			}
			if minBW < 0 {
				return usagef(cmd, "--min-bandwidth %v: want Gb/s, 0 or more", minBW)
			}
			return e.verify(cmd, o)
		},
	}
	f := c.Flags()
	f.StringVar(&size, "size", "64M", "bytes to register and move (K, M, G: base 1024)")
	f.StringVar(&timeout, "timeout", verify.DefaultTimeout.String(), "time allowed for the steps of one port")
	f.Float64Var(&minBW, "min-bandwidth", 0, "also measure RDMA write bandwidth and fail below `GBPS` Gb/s")
	// The root of /sys and /dev: for tests on a fixture tree.
	f.StringVar(&root, "root", "", "")
	_ = f.MarkHidden("root")
	return c
}

// verifyReport is verify's JSON document.
type verifyReport struct {
	Size    uint64        `json:"size"`
	Timeout string        `json:"timeout"`
	Steps   []verify.Step `json:"steps"`
}

func (e *env) verify(cmd *cobra.Command, o verify.Options) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	text := e.jsonMode() == ""
	if text {
		// Each step is printed as it ends (a port may take its whole
		// timeout), so the columns have fixed widths, not a tabwriter's.
		const row = "%-15s %-9s %-7s %8s  %s\n"
		if !e.noLegend {
			fmt.Fprintf(e.stdout, row, "SUBJECT", "STEP", "RESULT", "TIME", "DETAIL")
		}
		o.Progress = func(s verify.Step) {
			s = escaped(s)
			fmt.Fprintf(e.stdout, row, s.Subject, s.Name, s.Result, strconv.FormatFloat(s.Seconds, 'f', 3, 64)+"s", s.Detail)
			if s.Cause != "" {
				fmt.Fprintf(e.stdout, row, "", "", "", "", "cause: "+s.Cause)
			}
			if s.Fix != "" {
				fmt.Fprintf(e.stdout, row, "", "", "", "", "fix: "+s.Fix)
			}
		}
	}
	steps, err := verify.Run(ctx, o)
	var ae *verify.ArgError
	if errors.As(err, &ae) {
		return usagef(cmd, "%s", ae.Msg)
	}
	if err != nil {
		return err
	}
	if text {
		if !e.noLegend {
			n := map[verify.Result]int{}
			for _, s := range steps {
				n[s.Result]++
			}
			fmt.Fprintf(e.stdout, "\n%d ok, %d fail, %d skipped\n", n[verify.OK], n[verify.Fail], n[verify.Skipped])
		}
	} else {
		doc, err := json.Marshal(verifyReport{Size: o.Size, Timeout: o.Timeout.String(), Steps: steps})
		if err != nil {
			return err
		}
		if err := e.printDoc("", doc); err != nil {
			return err
		}
	}
	if verify.Failed(steps) {
		if text {
			return failf("verify: RDMA does not work for this user here (the failed steps say why)")
		}
		return silentFailure{}
	}
	return nil
}
