#!/bin/sh
# mutate.sh PKG...: gremlins (GREMLINS, the pinned binary make mutate
# installs) over daemon/PKG for each PKG, one package at a time, from the
# module root. What the numbers mean and the last ones measured are in
# docs/testing.md.
#
# - Each mutant is tested by its own package's tests (not the whole tree),
#   in a copy of the module; the test-helper packages (dcbtest, bustest...)
#   are not mutated.
# - GOFLAGS=-count=1 makes gremlins' coverage run execute the tests rather
#   than answer from the test cache: its duration, times the coefficient,
#   is each mutant's timeout, and a mutant also compiles and links its
#   package's tests again.
# - Two workers (MUTATE_WORKERS), at the lowest priority: the machine it
#   runs on is shared.
# - MUTATE_ONLY, an extended regexp of file paths relative to the
#   package (such as 'rtnl\.go' or 'value/.*|types\.go'), mutates only
#   those files: for a round that cannot measure a whole package.
# Results (one JSON file per package) go to $MUTATE_OUT (default
# mutate-out/, which git ignores).
set -eu
: "${GREMLINS:?set GREMLINS to the gremlins binary (make mutate does)}"
cd "$(dirname "$0")/.."
out=${MUTATE_OUT:-mutate-out}
mkdir -p "$out"
for pkg in "$@"; do
	echo "== daemon/$pkg $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null || true)"
	only=""
	if [ -n "${MUTATE_ONLY:-}" ]; then
		for f in $(cd "daemon/$pkg" && find . -name '*.go' ! -name '*_test.go' | sed 's|^\./||'); do
			echo "$f" | grep -Eq "^(${MUTATE_ONLY})\$" ||
				only="$only -E ^$(echo "$f" | sed 's/\./\\./g')\$"
		done
	fi
	# shellcheck disable=SC2086 # $only is a list of flags
	GOFLAGS=-count=1 nice -n 19 "$GREMLINS" unleash --workers "${MUTATE_WORKERS:-2}" --timeout-coefficient "${MUTATE_TIMEOUT_COEFFICIENT:-10}" \
		-E '[a-z]+test/' $only -o "$out/$pkg.json" "./daemon/$pkg"
done
