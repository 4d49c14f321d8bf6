#!/usr/bin/env bash
# The size budget of the shipped mobile library, without packaging anything: builds
# cellbind-mobile with the size-first `mobile` profile (a no-op when it is up to date), strips a
# copy as every package does, and prints its size and the headroom left under the budget
# (CB_SIZE_BUDGET in lib.sh). The wheel and jar builds make the same check on the library they
# ship; this is the quick one for a change that may grow the library.
#
# usage: check-size.sh
# Exits 1 when the stripped library is over the budget (on x86_64 Linux, the host the budget is
# for; elsewhere the size is printed for comparison). Needs: cargo, binutils' strip.
set -euo pipefail
# shellcheck source=mobile/scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$CB_ROOT"
cb_require strip "binutils"

cargo build --quiet --locked -p cellbind-mobile --profile mobile
lib="$CB_TARGET/mobile/libcellbind_mobile.so"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cb_strip strip "$lib" "$work/libcellbind_mobile.so"
echo "unstripped (symbols kept for uniffi-bindgen): $(stat -c %s "$lib") bytes"
if ! cb_size_report "stripped, $(uname -m)" "$(stat -c %s "$work/libcellbind_mobile.so")" &&
    cb_budget_applies; then
    echo "$(basename "$0"): FAILED: over the size budget (mobile/PACKAGING.md, \"The size budget\")" >&2
    exit 1
fi
