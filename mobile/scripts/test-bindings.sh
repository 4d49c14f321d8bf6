#!/usr/bin/env bash
# Generates the bindings and runs the Python and Kotlin binding tests against a running dev
# fleet (`cellctl dev`). The Python tests run against the wheel (mobile/scripts/build-wheel.sh)
# pip-installed into a fresh virtual environment, the Kotlin tests against the JVM jar
# (mobile/scripts/build-jar.sh) with the native library loaded from inside it, as an app
# developer would use them.
#
# usage: test-bindings.sh FLEET_JSON
# Needs: python3 with venv, maturin 1.16.0, a JDK or JRE (17), JNA (Debian libjna-java; override
# with JNA_JAR), npm (the Kotlin compiler is installed once into $CELLBIND_TOOLS_DIR, default
# $CARGO_TARGET_DIR/binding-tools), binutils' strip, unzip.
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 FLEET_JSON" >&2
    exit 2
fi
fleet="$(realpath "$1")"
# shellcheck source=mobile/scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
root="$CB_ROOT"
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
out="$target/bindings"

mobile/scripts/build-bindings.sh "$out"

status=0

# The Python tests use the wheel as an app developer would: pip-installed into a fresh venv.
# A wheel whose library is over the size budget is still written: its build fails (and so do
# these tests), but the tests run against it all the same.
python_tests() {
    local wheel_log="$out/build-wheel.log" venv="$out/venv" wheel built=0
    mobile/scripts/build-wheel.sh "$out/wheel" | tee "$wheel_log" || built=1
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
    "$venv/bin/python" mobile/tests/test_bindings.py "$fleet" || return 1
    return "$built"
}

echo "== python (the wheel in a fresh venv)"
python_tests || status=1

# The Kotlin tests use the JVM jar as an app developer would: from a directory outside the
# source tree, with only the jar, JNA and kotlinx-coroutines on the classpath and no
# jna.library.path, so the native library can only come from inside the jar. JNA's load log
# (written to a file, not the test output) must show that it did.
kotlin_tests() {
    local jar_log="$out/build-jar.log" kwork="$out/kotlin-test" jar built=0
    # (over the size budget: tested all the same, and failed, as the wheel above)
    mobile/scripts/build-jar.sh "$out/jar" | tee "$jar_log" || built=1
    jar="$(sed -n 's/^jar: //p' "$jar_log" | tail -n 1)"
    [ -f "$jar" ] || { echo "build-jar.sh named no jar" >&2; return 1; }
    cb_kotlinc || return 1

    # What the Kotlin test needs, flattened (the JVM has no JSON parser in its standard library).
    rm -rf "$kwork"
    mkdir -p "$kwork"
    python3 - "$fleet" "$kwork" "${CELLCTL:-$target/debug/cellctl}" <<'PY' || return 1
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
    # the outbox test stops and resumes the edges, migrates a contractor and reads app data
    "fleet_json": sys.argv[1],
    "cellctl": sys.argv[3],
    "edge_pids": ",".join(str(c["endpoint_pid"]) for c in fleet["cells"]),
    "cell_ids": ",".join(c["id"] for c in fleet["cells"]),
}
for c in fleet["cells"]:
    props[f"app_internal_url.{c['id']}"] = c["app_internal_url"]
    props[f"app_internal_token.{c['id']}"] = c["app_internal_token"]
with open(f"{work}/test.properties", "w") as f:
    for k, v in props.items():
        f.write(f"{k}=" + v.replace("\\", "\\\\") + "\n")
PY
    chmod 600 "$kwork/test.properties"
    cat >"$kwork/logging.properties" <<EOF
handlers=java.util.logging.FileHandler
java.util.logging.FileHandler.pattern=$kwork/jna-load.log
java.util.logging.FileHandler.formatter=java.util.logging.SimpleFormatter
java.util.logging.FileHandler.append=false
.level=INFO
EOF
    local result=0
    (cd "$kwork" && "$CB_KOTLINC" -J-ea -J-Djna.debug_load=true \
        "-J-Djava.util.logging.config.file=$kwork/logging.properties" \
        -cp "$jar:$CB_JNA_JAR:$CB_COROUTINES_JAR" \
        -script "$root/mobile/tests/BindingsTest.kts" "$kwork/test.properties") || result=1
    if grep -qF "Found library resource at jar:file:$jar!/" "$kwork/jna-load.log"; then
        echo "libcellbind_mobile loaded from the jar: $(basename "$jar")"
    else
        echo "JNA did not load libcellbind_mobile from the jar; its load log:" >&2
        cat "$kwork/jna-load.log" >&2
        result=1
    fi
    [ "$built" = 0 ] || result=1
    return "$result"
}

echo "== kotlin (the jar, its library loaded from the classpath)"
kotlin_tests || status=1

if [ "$status" -ne 0 ]; then
    echo "binding tests FAILED" >&2
fi
exit "$status"
