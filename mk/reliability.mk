# Fuzzing and the soak test (docs/faults.md).

# make fuzz runs every `func FuzzX` target of the tree for FUZZTIME each, one
# after the other (go test -fuzz takes one target at a time). A failing
# input is written to the package's testdata/fuzz/FuzzX/, where `make test`
# replays it from then on.
FUZZTIME ?= 20s

.PHONY: fuzz soak

fuzz:
	@set -e; for f in $$(git ls-files --cached --others --exclude-standard '*_test.go' | xargs grep -l '^func Fuzz'); do \
		pkg=./$$(dirname $$f); \
		for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
			echo "== $$pkg $$t ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$pkg; \
		done; \
	done
