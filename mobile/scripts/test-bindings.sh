#!/usr/bin/env bash
# Generates the bindings and runs the Python and Kotlin binding tests against a running dev
# fleet (`cellctl dev`).
#
# usage: test-bindings.sh FLEET_JSON
# Needs: python3, a JDK (17), JNA (Debian libjna-java; override with JNA_JAR), npm (the Kotlin
# compiler is installed once into $CELLBIND_TOOLS_DIR, default $CARGO_TARGET_DIR/binding-tools).
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

echo "== python"
PYTHONPATH="$out/python" python3 mobile/tests/test_bindings.py "$fleet" || status=1

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
