#!/usr/bin/env bash
# `cellctl client` against a running dev fleet: a refused sign-in, a sign-in, a route load and
# a job completion, each a separate invocation (the session lives in a file between them).
#
# usage: test-cli.sh FLEET_JSON      (CELLCTL overrides the cellctl binary)
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 FLEET_JSON" >&2
    exit 2
fi
fleet="$(realpath "$1")"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
cellctl="${CELLCTL:-$target/debug/cellctl}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# a session file of its own, so the test never touches another session of the fleet
session=(--session-file "$work/session.json")

read -r ctr login password cell < <(python3 - "$fleet" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["demo"]["technicians"][0]
print(t["contractor_id"], t["login"], t["password"], t["cell_id"])
PY
)

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

echo "== a wrong password is refused with a non-zero exit"
if printf '%s\n' "wrong-password" | "$cellctl" client sign-in "$ctr" "$login" --fleet "$fleet" "${session[@]}"; then
    fail "sign-in with a wrong password succeeded"
fi

echo "== sign-in (password on stdin)"
out="$(printf '%s\n' "$password" | "$cellctl" client sign-in "$ctr" "$login" --fleet "$fleet" "${session[@]}" --json)" ||
    fail "sign-in failed"
python3 -c 'import json,sys; v=json.loads(sys.argv[1]); assert v["cell_id"]==sys.argv[2], v' "$out" "$cell" ||
    fail "sign-in answered $out, expected cell $cell"
case "$out" in *"$password"*) fail "the password was printed" ;; esac

echo "== route load"
out="$("$cellctl" client get /api/routes/today --fleet "$fleet" "${session[@]}" --json)" || fail "get failed"
python3 -c 'import json,sys; v=json.loads(sys.argv[1]); assert v["status"]==200 and v["body"]["contractor_id"]==sys.argv[2], v' "$out" "$ctr" ||
    fail "route answered $out"

[ "$(stat -c %a "$work/session.json")" = 600 ] || fail "the session file is not 0600"

echo "== job completion"
out="$("$cellctl" client post /api/jobs/j-cli-sh-1/complete --body '{}' --fleet "$fleet" "${session[@]}" --json)" ||
    fail "post failed"
python3 -c 'import json,sys; v=json.loads(sys.argv[1]); assert v["status"]==200, v' "$out" || fail "post answered $out"

echo "cellctl client: PASS"
