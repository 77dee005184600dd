#!/bin/sh
# mutate.sh PKG...: mutation testing of daemon/PKG for each PKG, one
# package at a time, from the module root, with two tools (MUTATE_TOOLS,
# default both): gremlins (GREMLINS, the pinned binary make mutate
# installs: arithmetic, comparison boundaries and negations, increments,
# signs) and test/mutants (an if's condition negated, a call or a return
# dropped, a comparison or && flipped: the mutants gremlins does not
# make). What the numbers mean and the last ones measured are in
# docs/testing.md.
#
# - Each mutant is tested by its own package's tests (not the whole tree);
#   gremlins works in a copy of the module, test/mutants through go test
#   -overlay; the test-helper packages (dcbtest, bustest...) are not
#   mutated.
# - GOFLAGS=-count=1 makes gremlins' coverage run execute the tests rather
#   than answer from the test cache: its duration, times the coefficient,
#   is each mutant's timeout, and a mutant also compiles and links its
#   package's tests again.
# - Two workers (MUTATE_WORKERS, gremlins), at the lowest priority: the
#   machine it runs on is shared.
# - MUTATE_ONLY, an extended regexp of file paths relative to the
#   package (such as 'rtnl\.go' or 'value/.*|types\.go'), mutates only
#   those files: for a round that cannot measure a whole package.
# - test/mutants only: MUTATE_FUNCS (a regexp of function names) mutates
#   only those functions; MUTATE_RUN (a go test -run regexp) tests each
#   mutant with those tests first and the ones they let live with all;
#   MUTATE_SAMPLE=N tests N mutants picked at random (MUTATE_SEED);
#   MUTATE_JOBS mutants are tested at once (default 1; a bus test mostly
#   waits, so 3 go faster there);
#   MUTATE_TIMEOUT is each run's go test -timeout (default 10m);
#   MUTATE_FIELDS=1 also drops each key: value of a composite literal (a
#   table written as data, such as the bus's method table).
# Results (one JSON file per package and tool) go to $MUTATE_OUT (default
# mutate-out/, which git ignores).
set -eu
tools=${MUTATE_TOOLS:-gremlins mutants}
case " $tools " in *" gremlins "*) : "${GREMLINS:?set GREMLINS to the gremlins binary (make mutate does)}" ;; esac
cd "$(dirname "$0")/.."
out=${MUTATE_OUT:-mutate-out}
mkdir -p "$out"
go build -o "$out/mutants" ./test/mutants
for pkg in "$@"; do
	echo "== daemon/$pkg $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null || true)"
	case " $tools " in *" gremlins "*)
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
		;;
	esac
	case " $tools " in *" mutants "*)
		# One directory's files: subpackages are packages of their own.
		nice -n 19 "$out/mutants" -only "${MUTATE_ONLY:-.*}" ${MUTATE_FUNCS:+-funcs "$MUTATE_FUNCS"} ${MUTATE_FIELDS:+-fields} -run "${MUTATE_RUN:-}" \
			-workers "${MUTATE_JOBS:-1}" -sample "${MUTATE_SAMPLE:-0}" -seed "${MUTATE_SEED:-1}" -timeout "${MUTATE_TIMEOUT:-10m}" \
			-o "$out/$pkg-lines.json" "./daemon/$pkg"
		;;
	esac
done
