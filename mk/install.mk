# Placeholder until the boot-integration issue lands.
install: build
	@echo "install: not implemented yet" >&2; exit 1
