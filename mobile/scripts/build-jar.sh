#!/usr/bin/env bash
# Builds the JVM jar of the Cellbind SDK in a Maven repository layout:
#   OUT_DIR/maven/dev/cellbind/cellbind-mobile/<version>/cellbind-mobile-<version>.jar (+ .pom,
#   each with a .sha256)
# The jar holds the compiled Kotlin bindings (package dev.cellbind) and the host's native library
# at the path JNA loads it from the classpath (`linux-x86-64/libcellbind_mobile.so`), so an app
# needs no -Djna.library.path. The pom declares JNA, kotlinx-coroutines and kotlin-stdlib.
#
# Steps: cargo builds cellbind-mobile with the size-first `mobile` profile; uniffi-bindgen
# generates the Kotlin from that unstripped library; the pinned kotlinc compiles it; the jar
# ships a `strip --strip-all` copy of the library.
#
# usage: build-jar.sh [OUT_DIR]        (default: $CARGO_TARGET_DIR/jar)
# Prints the shipped library's size and, last, "jar: PATH" and the jar's size. On x86_64 Linux,
# exits 1 when that library is over the size budget (CB_SIZE_BUDGET in lib.sh), after writing the
# jar and printing its path (test-bindings.sh still tests it, and fails).
# Needs: cargo, python3, binutils' strip, unzip, a JDK/JRE 17, JNA (Debian libjna-java; JNA_JAR
# overrides), npm (installs the pinned Kotlin compiler once into $CELLBIND_TOOLS_DIR).
set -euo pipefail
# shellcheck source=mobile/scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [ $# -gt 1 ]; then
    echo "usage: $0 [OUT_DIR]" >&2
    exit 2
fi
mkdir -p "${1:-$CB_TARGET/jar}"
out="$(realpath "${1:-$CB_TARGET/jar}")"
cd "$CB_ROOT"

# JNA's resource prefix (com.sun.jna.Platform.RESOURCE_PREFIX) for this host.
case "$(uname -s)-$(uname -m)" in
    Linux-x86_64) prefix="linux-x86-64" ;;
    Linux-aarch64) prefix="linux-aarch64" ;;
    *) cb_die "no JNA resource prefix known for $(uname -s)-$(uname -m) (the jar carries the host's library)" ;;
esac
for tool in cargo python3 strip unzip; do
    cb_require "$tool" "see mobile/PACKAGING.md, the JVM jar"
done
[ -f "$CB_JNA_JAR" ] || cb_die "missing JNA jar at $CB_JNA_JAR (apt-get install libjna-java, or set JNA_JAR)"

version="$(cb_version)"
work="$out/work"
rm -rf "$work"
mkdir -p "$work/jar"

echo "== building the library (profile mobile)"
start=$SECONDS
cargo build --quiet -p cellbind-mobile --profile mobile
echo "cargo build took $((SECONDS - start)) s"
lib="$CB_TARGET/mobile/libcellbind_mobile.so"

echo "== generating and compiling the Kotlin bindings"
cb_generate kotlin "$lib" "$work/kotlin"
start=$SECONDS
cb_compile_kotlin "$work/kotlin" "$work/jar"
echo "kotlinc took $((SECONDS - start)) s"

echo "== packing the jar"
mkdir -p "$work/jar/$prefix"
cb_strip strip "$lib" "$work/jar/$prefix/libcellbind_mobile.so"
within_budget=1
cb_size_report "stripped, $prefix" "$(stat -c %s "$work/jar/$prefix/libcellbind_mobile.so")" ||
    within_budget=0
cb_pom "$CB_ARTIFACT" jar "$version" >"$work/pom.xml"
meta="$work/jar/META-INF/maven/$CB_GROUP/$CB_ARTIFACT"
mkdir -p "$meta"
cp "$work/pom.xml" "$meta/pom.xml"
printf 'groupId=%s\nartifactId=%s\nversion=%s\n' "$CB_GROUP" "$CB_ARTIFACT" "$version" >"$meta/pom.properties"
cat >"$work/jar/META-INF/MANIFEST.MF" <<EOF
Manifest-Version: 1.0
Automatic-Module-Name: $CB_GROUP
Implementation-Title: $CB_ARTIFACT
Implementation-Version: $version

EOF
cb_zip "$work/$CB_ARTIFACT.jar" "$work/jar"
cb_maven_put "$out/maven" "$CB_ARTIFACT" "$version" jar "$work/$CB_ARTIFACT.jar" "$work/pom.xml"
jar="$CB_MAVEN_PATH"
rm -rf "$work"
echo "jar size: $(stat -c %s "$jar") bytes"
echo "jar: $jar"
if [ "$within_budget" = 0 ] && cb_budget_applies; then
    cb_over_budget "$(basename "$0")"
    exit 1
fi
