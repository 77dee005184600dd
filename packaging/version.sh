#!/bin/sh
# rdmad's version, from the VERSION file (docs/decisions/packaging.md, Versions).
#
#   version.sh                  the version of this tree: what `rdmad --version`,
#                               `rdmactl --version`, the D-Bus Version property and
#                               rdmad_build_info say (the Makefile's VERSION)
#   version.sh --package V      V as a .deb and .rpm version
#
# VERSION holds the semantic version of the last release, or of the one being
# made (MAJOR.MINOR.PATCH, optionally -PRERELEASE). A build of the commit
# tagged v<VERSION> with no local change is that release: "1.0.0". Any other
# build is a development build after it and says so:
#   1.0.0+12.gabc1234           12 commits after v1.0.0 (or, before that tag
#                               exists, after the commit that last changed
#                               VERSION), at commit abc1234
#   1.0.0+12.gabc1234.dirty     the same with uncommitted changes
# Outside a git work tree (the source tarball of `make dist`) VERSION already
# holds the full version of the commit it was made from and is used as it is.
#
# Package versions keep the ordering of releases: "+" sorts after the release
# in dpkg and rpm, a pre-release's "-" becomes "~" so 1.1.0-rc.1 sorts before
# 1.1.0 (1.1.0~rc.1), any other "-" becomes ".".
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)

semver='^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$'

package_version() {
	v=$1
	printf '%s\n' "$v" | grep -Eq "$semver" ||
		{ echo "version.sh: '$v' is not a semantic version (MAJOR.MINOR.PATCH[-PRE][+BUILD])" >&2; exit 1; }
	core=${v%%+*}
	build=
	case $v in *+*) build=+${v#*+} ;; esac
	case $core in
	*-*) core=${core%%-*}~$(printf '%s\n' "${core#*-}" | tr -- - .) ;;
	esac
	printf '%s%s\n' "$core" "$(printf '%s\n' "$build" | tr -- - .)"
}

if [ "${1:-}" = --package ]; then
	package_version "${2:?usage: version.sh --package VERSION}"
	exit 0
fi
[ $# -eq 0 ] || { echo "usage: version.sh [--package VERSION]" >&2; exit 2; }

file=$here/VERSION
[ -f "$file" ] || { echo "version.sh: $file missing" >&2; exit 1; }
v=$(sed -n '1{s/[[:space:]]*$//;p;}' "$file")
printf '%s\n' "$v" | grep -Eq "$semver" ||
	{ echo "version.sh: $file holds '$v', not a semantic version (MAJOR.MINOR.PATCH[-PRE])" >&2; exit 1; }

# Only the repository's own .git counts: a tarball unpacked inside another
# repository's work tree is still a tarball.
if [ ! -e "$here/.git" ] || ! git -C "$here" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	printf '%s\n' "$v"
	exit 0
fi
case $v in *+*) echo "version.sh: $file holds '$v': build metadata is added by this script, not written there" >&2; exit 1 ;; esac

dirty=
git -C "$here" update-index -q --refresh >/dev/null 2>&1 || true
git -C "$here" diff-index --quiet HEAD -- 2>/dev/null || dirty=.dirty
tag=v$v
if [ -z "$dirty" ] && [ "$(git -C "$here" rev-parse -q --verify "refs/tags/$tag^{commit}" 2>/dev/null)" = "$(git -C "$here" rev-parse HEAD)" ]; then
	printf '%s\n' "$v"
	exit 0
fi
if git -C "$here" rev-parse -q --verify "refs/tags/$tag^{commit}" >/dev/null 2>&1; then
	base=$tag
else
	base=$(git -C "$here" log -1 --format=%H -- VERSION)
fi
if [ -n "$base" ]; then
	count=$(git -C "$here" rev-list --count "$base..HEAD")
else # VERSION not committed yet
	count=$(git -C "$here" rev-list --count HEAD)
fi
printf '%s+%s.g%s%s\n' "$v" "$count" "$(git -C "$here" rev-parse --short=7 HEAD)" "$dirty"
