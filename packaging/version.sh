#!/bin/sh
# Maps the version of `git describe --tags --always --dirty` (the binaries'
# version, Makefile VERSION) to a package version that dpkg and rpm both
# order correctly:
#   v1.2.3                  -> 1.2.3
#   v1.2.3-4-gabc1234       -> 1.2.3+4.gabc1234      (after the tag)
#   abc1234 (no tag yet)    -> 0.0~git57.gabc1234    (57 commits; before any release;
#                              also a hash made only of digits, e.g. 9253944)
#   ...-dirty               -> ... .dirty appended
#   anything else           -> '-' replaced by '~' (e.g. 0.1.0-dev -> 0.1.0~dev)
set -eu
v=${1:?usage: version.sh VERSION}
tagged=no
case $v in v[0-9]*) tagged=yes ;; esac
v=${v#v}
suffix=
case $v in *-dirty) v=${v%-dirty} suffix=.dirty ;; esac

# An abbreviated hash (git describe without a tag) first: one made only of
# digits would otherwise read as release 9253944 and sort above every later
# build. Release tags are v-prefixed.
if [ $tagged = no ] && printf '%s\n' "$v" | grep -Eq '^[0-9a-f]{7,40}$'; then
	count=$(git rev-list --count HEAD 2>/dev/null || echo 0)
	out=0.0~git$count.g$v
elif printf '%s\n' "$v" | grep -Eq '^[0-9]+(\.[0-9]+)*$'; then
	out=$v
elif printf '%s\n' "$v" | grep -Eq '^[0-9]+(\.[0-9]+)*-[0-9]+-g[0-9a-f]+$'; then
	out=$(printf '%s\n' "$v" | sed -E 's/^(.*)-([0-9]+)-(g[0-9a-f]+)$/\1+\2.\3/')
else
	out=$(printf '%s\n' "$v" | tr -- '-' '~')
fi
out=$out$suffix
if ! printf '%s\n' "$out" | grep -Eq '^[0-9][A-Za-z0-9.+~]*$'; then
	echo "version.sh: cannot make a package version of '$1' (got '$out')" >&2
	exit 1
fi
printf '%s\n' "$out"
