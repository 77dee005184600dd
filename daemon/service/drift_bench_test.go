package service_test

import (
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
)

// processCPU is this process's CPU time so far, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkContestedSettingWriterLoop is what a contested TOS costs rdmad
// (this process: the service, its directory watcher and its work loop on
// the mlx5 fixture) while another process rewrites it in a loop
// (os.pwrite in python3, hundreds of thousands of writes a second): one op
// is a second of the other writer; cpu-% is rdmad's CPU time over it, in
// percent of one CPU. Before the back-off covered reads, each write was an
// event, a pass and a read.
func BenchmarkContestedSettingWriterLoop(b *testing.B) {
	if _, err := exec.LookPath("python3"); err != nil {
		b.Skip("no python3 for the other writer")
	}
	r := newDriftRig(b, driftCfg(config.DriftCorrect, "[[roce]]\ndevice = \"mlx5_0\"\ntos = 106\n"))
	tosFile := r.contestTOS(b)
	writer := exec.Command("python3", "-c", "import os, sys\nf = os.open(sys.argv[1], os.O_WRONLY)\nwhile True: os.pwrite(f, b'0\\n', 0)", r.h.Path(tosFile))
	if err := writer.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = writer.Process.Kill(); _ = writer.Wait() }()
	time.Sleep(200 * time.Millisecond)
	b.ResetTimer()
	start, cpu := time.Now(), processCPU()
	for range b.N {
		time.Sleep(time.Second)
	}
	b.StopTimer()
	b.ReportMetric(100*float64(processCPU()-cpu)/float64(time.Since(start)), "cpu-%")
}
