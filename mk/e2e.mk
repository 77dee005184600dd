# Placeholder until the boot-integration issue lands.
e2e:
	@echo "e2e: not implemented yet" >&2; exit 1
