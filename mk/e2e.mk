# Real-kernel end-to-end test: boots a Debian bookworm VM under qemu (TCG)
# with rdmad installed by `make install DESTDIR=...` and runs the scenarios of
# test/e2e/guest. Needs root (apt-get, chroot, mke2fs -d ownership).
# See docs/e2e.md.
.PHONY: e2e e2e-image

e2e:
	./test/e2e/run.sh

# Build (or find) the cached guest rootfs only.
e2e-image:
	./test/e2e/image.sh
