package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/test/perf"
)

// driftRow is what the live-truth measurements found at one size.
type driftRow struct {
	n                   int
	verify, floorVerify time.Duration
	correct, correctMax time.Duration
	idle, idleIB        float64 // share of one core; measured at the largest size only
	idleMeasured        bool
}

// measureDrift measures at n devices: the verify read-back (a pass that
// reads again every declared setting of every known device, in process)
// beside the bare-syscall floor of the reads it needs; an out-of-band
// change put back by the rdmad binary running as a daemon (another
// process writes a port's TOS; the time until configfs shows the declared
// value again), each on another device so none is contested; and, when
// idle > 0, the daemon's CPU over idle with nothing happening, on the
// RoCE host and on the same host with InfiniBand ports (whose states it
// polls every 10 s).
func measureDrift(bin, addr string, n, runs int, idle time.Duration) (driftRow, error) {
	r := driftRow{n: n}
	h, err := perf.NewHost(n)
	if err != nil {
		return r, err
	}
	defer h.Remove()
	d, err := perf.StartDaemon(h, addr)
	if err != nil {
		return r, err
	}
	rec, pol := d.Svc.Reconciler(), d.Svc.PolicyInForce()
	all := map[string]bool{}
	for i := 0; i < n; i++ {
		all[fmt.Sprintf("mlx5_%d", i)] = true
	}
	verifyOnce := func() error {
		rep := rec.Pass(context.Background(), pol, reconcile.Scope{Recheck: all, Verify: true})
		for _, a := range rep.Actions {
			if a.Status != reconcile.Unchanged {
				return fmt.Errorf("the verify read-back of a host that holds the policy did %s", a)
			}
		}
		return nil
	}
	// The read-back and its floor take turns, so a busy moment of the
	// machine falls on both alike.
	var verifies, floors []time.Duration
	for i := 0; i < runs && err == nil; i++ {
		var v, f time.Duration
		if v, err = timed(verifyOnce); err == nil {
			f, err = timed(h.FloorVerify)
		}
		verifies, floors = append(verifies, v), append(floors, f)
	}
	d.Stop()
	if err != nil {
		return r, err
	}
	r.verify, r.floorVerify = middle(verifies), middle(floors)

	run, err := perf.StartBinary(bin, addr, h, false)
	if err != nil {
		return r, err
	}
	var samples []time.Duration
	for i := 0; i < runs; i++ {
		// Each port at most 4 times: a fifth correction within a minute
		// would make the setting contested.
		took, err := run.Correct(fmt.Sprintf("mlx5_%d", (n/2+i/2)%n), i%2+1)
		if err != nil {
			run.Stop()
			return r, err
		}
		samples = append(samples, took)
		time.Sleep(100 * time.Millisecond) // the correction's echo
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	r.correct, r.correctMax = samples[len(samples)/2], samples[len(samples)-1]
	if idle > 0 {
		time.Sleep(2 * time.Second) // settle
		r.idle, err = run.Idle(idle)
	}
	run.Stop()
	if err != nil || idle <= 0 {
		return r, err
	}
	if err := h.MakeInfiniBand(); err != nil {
		return r, err
	}
	ib, err := perf.StartBinary(bin, addr, h, true)
	if err != nil {
		return r, err
	}
	defer ib.Stop()
	r.idleIB, err = ib.Idle(idle)
	r.idleMeasured = err == nil
	return r, err
}

func printDrift(rows []driftRow, runs int, idle time.Duration) {
	fmt.Printf("\nlive truth (median of %d runs; times in ms):\n\n", runs)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "N\tverify read-back\tits floor\tverify/floor\tout-of-band change corrected\tmax\tidle CPU RoCE\tidle CPU IB (10 s port poll)\t")
	for _, r := range rows {
		idleRoCE, idleIB := "-", "-"
		if r.idleMeasured {
			idleRoCE, idleIB = fmt.Sprintf("%.3f %%", 100*r.idle), fmt.Sprintf("%.3f %%", 100*r.idleIB)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.n, ms(r.verify), ms(r.floorVerify), ratio(r.verify, r.floorVerify),
			ms(r.correct), ms(r.correctMax), idleRoCE, idleIB)
	}
	tw.Flush()
	fmt.Printf("verify read-back: a pass that reads every declared setting of every known device again, in process; its floor: bare open/fstat/read/close of each port's mode and TOS.\n")
	fmt.Printf("corrected: the rdmad binary as a daemon; another process writes 0 to a port's TOS, until configfs shows 106 again (inotify on the port's directory).\n")
	fmt.Printf("idle: the daemon's utime+stime over %s with nothing happening, metrics off, as a share of one core.\n", idle)
	last := rows[len(rows)-1]
	fmt.Printf("\ntargets at N=%d:\n", last.n)
	check := func(ok bool, what string) {
		mark := "met"
		if !ok {
			mark = "NOT MET"
		}
		fmt.Printf("  %-7s %s\n", mark, what)
	}
	check(last.verify*2 <= last.floorVerify*3, fmt.Sprintf("verify read-back within 1.5x of its floor: %s", ratio(last.verify, last.floorVerify)))
	check(last.correctMax < time.Second, fmt.Sprintf("an out-of-band change corrected in under 1 s: max %s ms", ms(last.correctMax)))
	if last.idleMeasured {
		check(last.idle < 0.005, fmt.Sprintf("idle at %d RoCE devices, metrics off, under 0.5 %% of one core: %.3f %%", last.n, 100*last.idle))
	}
}
