# Real-kernel end-to-end test: boots Debian VMs under qemu (TCG) with rdmad
# installed into them and runs the scenarios of test/e2e/guest on each kernel:
# bookworm (6.1) and trixie (6.12, with an out-of-tree Soft-iWARP module).
# `make e2e` runs both suites, `make e2e SUITE=bookworm` (or trixie) one.
# Needs root (apt-get, chroot, mke2fs -d ownership). See docs/e2e.md.
SUITE ?=

.PHONY: e2e e2e-image

e2e:
	./test/e2e/run.sh $(SUITE)

# Build (or find) the cached guest rootfs of each suite only.
e2e-image:
	@for s in $(or $(SUITE),bookworm trixie); do ./test/e2e/image.sh $$s || exit 1; done
