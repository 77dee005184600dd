#!/bin/sh
# `make dist`: the source tarball a distribution rebuilds without network
# (docs/decisions/packaging.md, Source tarball).
#
#   dist/rdmad-<version>.tar.gz    rdmad-<version>/ holding the tracked files of
#                                  this tree as they are in the work tree, plus
#       vendor/                    every Go module the build and tests need
#                                  (go mod vendor), so GOFLAGS=-mod=vendor
#                                  GOPROXY=off builds it
#       VERSION, REVISION          the version and commit of this build
#                                  (packaging/version.sh), read where there is
#                                  no .git
#       debian/                    packaging/debian with the generated changelog,
#                                  the copyright files, lintian overrides and
#                                  the maintainer scripts of packaging/deb
#       rdmad.spec                 packaging/rpm/rdmad.spec with the version in
#                                  (also in place under packaging/rpm/)
#       rdmad.cdx.json             the CycloneDX SBOM (packaging/sbom)
#   dist/rdmad-<version>.cdx.json  the same SBOM beside the tarball
#
# Environment: VERSION, REVISION (from the Makefile), GO, DIST (default dist),
# SOURCE_DATE_EPOCH (default: the commit's time; every file gets it, so the
# same commit gives the same tarball), PKG_MAINTAINER. Owners, times and
# modes are normalised (modes to go-w,a+rX: 0644, and 0755 for directories
# and what is executable), so the tarball's bytes do not depend on the
# umask the clone was made or built under.
# go mod vendor needs the modules: in the Go module cache, or from the proxy.
set -eu
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
go=${GO:-go}
VERSION=${VERSION:-$(packaging/version.sh)}
REVISION=${REVISION:-$(git rev-parse HEAD)}
PKG_VERSION=$(packaging/version.sh --package "$VERSION")
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
export SOURCE_DATE_EPOCH
maintainer=${PKG_MAINTAINER:-rdmad developers <rdmad@users.noreply.github.com>}

dist=${DIST:-dist}
mkdir -p "$dist"
dist=$(cd "$dist" && pwd)
name=rdmad-$VERSION
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
src=$stage/$name
mkdir "$src"

# The tracked files as the work tree has them (a file deleted but not yet
# committed is left out); symlinks stay links (the fixture hosts' sysfs).
git ls-files -z | tar --null --no-recursion --ignore-failed-read -T - -cf - 2>/dev/null | tar -C "$src" -xf -

(cd "$src" && GOFLAGS=-mod=mod "$go" mod vendor) ||
	{ echo "dist: go mod vendor failed (the modules come from the Go module cache or proxy)" >&2; exit 1; }
printf '%s\n' "$VERSION" >"$src/VERSION"
printf '%s\n' "$REVISION" >"$src/REVISION"

# debian/: plain dh (packaging/debian), the rest from the files the nfpm
# packages use, so both builds ship the same scripts and texts.
cp -R packaging/debian "$src/debian"
for s in preinst postinst prerm postrm; do
	install -m 0755 "packaging/deb/$s" "$src/debian/rdmad.$s"
done
cp packaging/copyright "$src/debian/copyright"
cp packaging/cockpit-rdmad.copyright "$src/debian/cockpit-rdmad.copyright"
cp packaging/deb/lintian-overrides "$src/debian/rdmad.lintian-overrides"
cp packaging/deb/cockpit-rdmad.lintian-overrides "$src/debian/cockpit-rdmad.lintian-overrides"
date=$(date -u -R -d "@$SOURCE_DATE_EPOCH")
printf 'rdmad (%s) unstable; urgency=medium\n\n  * rdmad %s, commit %s. What changed: CHANGELOG.md.\n\n -- %s  %s\n' \
	"$PKG_VERSION" "$VERSION" "$REVISION" "$maintainer" "$date" >"$src/debian/changelog"

sed -e "s|@VERSION@|$VERSION|g" -e "s|@PKG_VERSION@|$PKG_VERSION|g" packaging/rpm/rdmad.spec >"$src/packaging/rpm/rdmad.spec"
cp "$src/packaging/rpm/rdmad.spec" "$src/rdmad.spec"

(cd "$src" && GOFLAGS=-mod=vendor GOPROXY=off "$go" run ./packaging/sbom -version "$VERSION" -o rdmad.cdx.json) ||
	{ echo "dist: the SBOM could not be written" >&2; exit 1; }

out=$dist/$name.tar.gz
rm -f "$out" "$dist/$name.cdx.json"
tar -C "$stage" --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner --mode=go-w,a+rX \
	--format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
	-cf - "$name" | gzip -9n >"$out"
cp "$src/rdmad.cdx.json" "$dist/$name.cdx.json"
echo "$out"
