#!/usr/bin/env bash
# Generates the bindings and runs the Python and Kotlin binding tests against a running dev
# fleet (`cellctl dev`). The Python tests run against the wheel (mobile/scripts/build-wheel.sh)
# pip-installed into a fresh virtual environment, as an app developer would use it.
#
# usage: test-bindings.sh FLEET_JSON
# Needs: python3 with venv, maturin 1.16.0, a JDK (17), JNA (Debian libjna-java; override with
# JNA_JAR), npm (the Kotlin compiler is installed once into $CELLBIND_TOOLS_DIR, default
# $CARGO_TARGET_DIR/binding-tools).
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 FLEET_JSON" >&2
    exit 2
fi
fleet="$(realpath "$1")"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
out="$target/bindings"
tools="${CELLBIND_TOOLS_DIR:-$target/binding-tools}"
kotlin_version="2.4.20"
jna="${JNA_JAR:-/usr/share/java/jna.jar}"

mobile/scripts/build-bindings.sh "$out"

status=0

# The Python tests use the wheel as an app developer would: pip-installed into a fresh venv.
python_tests() {
    local wheel_log="$out/build-wheel.log" venv="$out/venv" wheel
    mobile/scripts/build-wheel.sh "$out/wheel" | tee "$wheel_log" || return 1
    wheel="$(sed -n 's/^wheel: //p' "$wheel_log" | tail -n 1)"
    [ -f "$wheel" ] || { echo "build-wheel.sh named no wheel" >&2; return 1; }
    rm -rf "$venv"
    python3 -m venv "$venv" || return 1
    # the wheel has no dependencies: nothing is fetched
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-index --no-deps \
        "$wheel" || return 1
    echo "installed $(basename "$wheel"); $(grep '^shipped library' "$wheel_log")"
    # from outside the source tree, so that only the installed package can be imported
    (cd "$venv" && "$venv/bin/python" - "$venv" <<'PY'
import os, sys
import cellbind
where = os.path.realpath(cellbind.__file__)
assert where.startswith(os.path.realpath(sys.argv[1]) + os.sep), f"cellbind imported from {where}"
print(f"cellbind imported from the venv: {where}")
PY
    ) || return 1
    "$venv/bin/python" mobile/tests/test_bindings.py "$fleet"
}

echo "== python (the wheel in a fresh venv)"
python_tests || status=1

echo "== kotlin"
kdir="$tools/node_modules/kotlin-compiler"
if [ ! -x "$kdir/bin/kotlinc" ] || ! grep -q "\"version\": \"$kotlin_version\"" "$kdir/package.json"; then
    mkdir -p "$tools"
    npm install --prefix "$tools" --no-audit --no-fund "kotlin-compiler@$kotlin_version"
fi
kotlinc="$kdir/bin/kotlinc"
coroutines="$kdir/lib/kotlinx-coroutines-core-jvm.jar"
[ -f "$jna" ] || { echo "JNA not found at $jna (apt-get install libjna-java)" >&2; exit 1; }

# What the Kotlin test needs, flattened (the JVM has no JSON parser in its standard library).
kwork="$out/kotlin-test"
mkdir -p "$kwork"
python3 - "$fleet" "$kwork" <<'PY'
import json, ssl, sys, urllib.request
fleet = json.load(open(sys.argv[1]))
work = sys.argv[2]
ctx = ssl.create_default_context(cafile=fleet["ca_cert"])
with urllib.request.urlopen(fleet["cells"][0]["endpoint"] + "/v1/placement-map", context=ctx, timeout=10) as r:
    open(f"{work}/map.json", "wb").write(r.read())
t = fleet["demo"]["technicians"][0]
props = {
    "ca_cert": fleet["ca_cert"],
    "map_file": f"{work}/map.json",
    "map_public_key": fleet["map_public_key"],
    "contractor_id": t["contractor_id"],
    "login": t["login"],
    "password": t["password"],
    "cell_id": t["cell_id"],
}
with open(f"{work}/test.properties", "w") as f:
    for k, v in props.items():
        f.write(f"{k}=" + v.replace("\\", "\\\\") + "\n")
PY
chmod 600 "$kwork/test.properties"

"$kotlinc" -d "$kwork/cellbind.jar" -cp "$jna:$coroutines" "$out/kotlin/dev/cellbind/cellbind.kt"
"$kotlinc" -J-ea "-J-Djna.library.path=$target/debug" -cp "$kwork/cellbind.jar:$jna:$coroutines" \
    -script mobile/tests/BindingsTest.kts "$kwork/test.properties" || status=1

if [ "$status" -ne 0 ]; then
    echo "binding tests FAILED" >&2
fi
exit "$status"
