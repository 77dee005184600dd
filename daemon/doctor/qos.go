package doctor

import (
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/qos"
)

// checkMLX4Initramfs: rdmad's mlx4_en PFC options reach a driver loaded
// from the initramfs only once the initramfs is rebuilt.
func (d *diag) checkMLX4Initramfs() {
	if exists(d.h, qos.MLX4File) {
		d.checkInitramfs(qos.MLX4File, initramfsCheck{
			id: "qos-mlx4-initramfs-stale", module: "mlx4_en",
			needs:       func(m string) bool { return host.NormalizeModule(m) == "mlx4_en" },
			consequence: "the next boot loads mlx4_en with the old PFC options",
		})
	}
}
