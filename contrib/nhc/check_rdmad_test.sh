#!/bin/bash
# The bash harness of rdmad.nhc: NHC's die and dbg stubbed, check_rdmad
# run as NHC runs it. Usage: check_rdmad_test.sh EXPECT [CHECK_ARGS...]
#   EXPECT  pass, or the message die must get (a prefix)
# RDMAD_RDMACTL is the rdmactl to run (the Go test points it at a real
# rdmad on a private bus). NHC itself is not packaged in Debian and never
# ran this: docs/fleet.md says so.
set -u
here=$(cd "$(dirname "$0")" && pwd)
died=""
function die() { died="$2"; return "$1"; }
function dbg() { :; }
# shellcheck source=rdmad.nhc
. "$here/rdmad.nhc"
expect=$1; shift
check_rdmad "$@"
rc=$?
if [[ $expect == pass ]]; then
    [[ $rc == 0 && -z $died ]] || { echo "want pass, got rc $rc, die: $died"; exit 1; }
else
    [[ $rc == 1 && $died == "$expect"* ]] || { echo "want die with '$expect...', got rc $rc, die: '$died'"; exit 1; }
fi
echo "ok: ${died:-pass}"
