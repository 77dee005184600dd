# Fuzzing and the soak test (docs/security.md, Faults).

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

# make soak: the real rdmad on a private bus and the demo fixture host,
# under 8 clients, config rewrites, SIGHUPs and netdev events, for
# SOAK_DURATION twice: built with -race, then as shipped with its memory
# measured (cmd/rdmad/soak_test.go; make test runs it for a few seconds,
# which checks answers, final state and races; growth is judged from 20s on).
SOAK_DURATION ?= 30s

soak:
	SOAK_DURATION=$(SOAK_DURATION) $(GO) test -count=1 -run '^TestSoak$$' -v -timeout 30m ./cmd/rdmad
