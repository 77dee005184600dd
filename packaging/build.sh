#!/bin/sh
# Builds dist/rdmad_<version>_<arch>.deb and dist/rdmad-<version>.<arch>.rpm,
# and the Cockpit page's dist/cockpit-rdmad_<version>_all.deb and .noarch.rpm,
# with nfpm (see docs/decisions/packaging.md). Called by `make package`:
#   VERSION   binaries' version (packaging/version.sh), mapped by version.sh --package
#   LDFLAGS   Go linker flags of the Makefile (version stamp)
#   NFPM      the pinned nfpm binary
#   PKG_VERSION, PKG_ARCH   override the package version / Debian arch
#   DIST      output directory (default dist; the tree is staged in DIST/stage)
# The tree is staged with `make install` (static binaries, CGO_ENABLED=0) so
# the package ships exactly the install layout; man pages and the changelog
# are compressed as Debian policy wants; timestamps come from the commit
# (SOURCE_DATE_EPOCH), so the same commit builds the same package.
set -eu
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
: "${VERSION:?VERSION not set (run make package)}" "${NFPM:?NFPM not set (run make package)}"
make=${MAKE:-make}
go=${GO:-go}

PKG_VERSION=${PKG_VERSION:-$(packaging/version.sh --package "$VERSION")}
PKG_ARCH=${PKG_ARCH:-$($go env GOARCH)}
PKG_MAINTAINER=${PKG_MAINTAINER:-rdmad developers <rdmad@users.noreply.github.com>}
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
export PKG_VERSION PKG_ARCH PKG_MAINTAINER SOURCE_DATE_EPOCH

dist=${DIST:-dist}
mkdir -p "$dist"
dist=$(cd "$dist" && pwd)
PKG_STAGE=$dist/stage
export PKG_STAGE
stage=$PKG_STAGE
rm -rf "$stage" "$dist/bin"
CGO_ENABLED=0 GOFLAGS="${GOFLAGS:+$GOFLAGS }-trimpath" \
	$make --no-print-directory install DESTDIR="$stage" PREFIX=/usr \
	BIN="$dist/bin" LDFLAGS="${LDFLAGS:-} -s -w" >"$dist/install.log" 2>&1 ||
	{ cat "$dist/install.log" >&2; echo "package: make install into $stage failed" >&2; exit 1; }

# Debian policy: man pages and changelog gzip -9n; copyright beside it.
find "$stage/usr/share/man" -type f -name '*.[0-9]' -exec gzip -9n {} +
doc=$stage/usr/share/doc/rdmad
install -D -m 0644 packaging/copyright "$doc/copyright"
date=$(date -u -R -d "@$SOURCE_DATE_EPOCH")
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
printf 'rdmad (%s) unstable; urgency=medium\n\n  * Built from commit %s (%s).\n\n -- %s  %s\n' \
	"$PKG_VERSION" "$commit" "$VERSION" "$PKG_MAINTAINER" "$date" | gzip -9n >"$doc/changelog.gz"
# cockpit-rdmad (packaging/cockpit-rdmad.yaml): the page from the same stage.
cdoc=$stage/usr/share/doc/cockpit-rdmad
install -D -m 0644 packaging/cockpit-rdmad.copyright "$cdoc/copyright"
printf 'cockpit-rdmad (%s) unstable; urgency=medium\n\n  * Built from commit %s (%s).\n\n -- %s  %s\n' \
	"$PKG_VERSION" "$commit" "$VERSION" "$PKG_MAINTAINER" "$date" | gzip -9n >"$cdoc/changelog.gz"
find "$stage" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

rm -f "$dist"/rdmad_*.deb "$dist"/rdmad-*.rpm
for packager in deb rpm; do
	"$NFPM" package --config packaging/nfpm.yaml --packager "$packager" --target "$dist/" >&2
done
rm -f "$dist"/cockpit-rdmad_*.deb "$dist"/cockpit-rdmad-*.rpm
for packager in deb rpm; do
	"$NFPM" package --config packaging/cockpit-rdmad.yaml --packager "$packager" --target "$dist/" >&2
done
ls "$dist"/rdmad_*.deb "$dist"/rdmad-*.rpm "$dist"/cockpit-rdmad_*.deb "$dist"/cockpit-rdmad-*.rpm
