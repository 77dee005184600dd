#!/bin/sh
# Checks the Cockpit page before it is installed or packaged (`make cockpit`):
# every file is there, manifest.json is JSON, and index.html references only
# files of the page and Cockpit's ../base1/cockpit.js, with no inline script
# (Cockpit's content security policy would refuse it). The page's DOM use is
# checked by test/web (no innerHTML: device names are hostile input).
set -eu
for f in "$@"; do
	[ -f "$f" ] || { echo "cockpit: $f missing" >&2; exit 1; }
done
dir=$(dirname "$1")
python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$dir/manifest.json" ||
	{ echo "cockpit: $dir/manifest.json is not JSON" >&2; exit 1; }
grep -o -E '(src|href)="[^"]*"' "$dir/index.html" | sed -E 's/^(src|href)="(.*)"$/\2/' | while read -r ref; do
	case $ref in
	../base1/cockpit.js) ;;
	*/* | "") echo "cockpit: index.html references $ref outside the page" >&2; exit 1 ;;
	*) [ -f "$dir/$ref" ] || { echo "cockpit: index.html references missing $ref" >&2; exit 1; } ;;
	esac
done
if grep -n -E '<script>|<script [^>]*>[^<]|on[a-z]+="' "$dir/index.html"; then
	echo "cockpit: index.html has inline script (Cockpit's CSP refuses it)" >&2
	exit 1
fi
echo "cockpit: $* ok"
