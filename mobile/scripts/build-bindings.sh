#!/usr/bin/env bash
# Builds the cellbind-mobile cdylib and uniffi-bindgen, then generates the Python, Kotlin and
# Swift bindings in library mode, and checks the Swift ones statically (no Swift toolchain):
# the C header compiles, every FFI symbol it names is exported by the library, and the
# generated Swift matches the committed golden copy in mobile/bindings/swift.
#
# usage: build-bindings.sh [OUT_DIR] [--update-golden]
#   OUT_DIR defaults to $CARGO_TARGET_DIR/bindings (target/bindings).
#   --update-golden rewrites mobile/bindings/swift from this build.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
out=""
update_golden=0
for a in "$@"; do
    case "$a" in
        --update-golden) update_golden=1 ;;
        *) out="$a" ;;
    esac
done
out="${out:-$target/bindings}"

echo "== building the cdylib"
cargo build -p cellbind-mobile
echo "== building uniffi-bindgen"
if grep -q '"mobile/uniffi-bindgen"' Cargo.toml; then
    cargo build -p cellbind-uniffi-bindgen
else
    # not (yet) a workspace member: it has its own [workspace] table
    cargo build --manifest-path mobile/uniffi-bindgen/Cargo.toml --target-dir "$target"
fi

lib="$target/debug/libcellbind_mobile.so"
bindgen="$target/debug/uniffi-bindgen"
rm -rf "$out"
mkdir -p "$out"
for lang in python kotlin swift; do
    echo "== generating $lang"
    "$bindgen" generate --no-format --language "$lang" --out-dir "$out/$lang" "$lib"
done
# Python loads the library from the directory of the generated module.
cp "$lib" "$out/python/"

echo "== checking the Swift bindings statically"
header="$out/swift/cellbindFFI.h"
# included from a translation unit, as a Swift module map would (no "#pragma once in main file")
printf '#include "cellbindFFI.h"\n' |
    gcc -x c -std=c11 -Wall -Werror -D_Nonnull= -D_Nullable= -I "$out/swift" -fsyntax-only -
nm -D --defined-only "$lib" | awk '{print $NF}' | sort -u > "$out/exported.txt"
grep -oE '\b(uniffi|ffi)_cellbind_mobile_[A-Za-z0-9_]+ *\(' "$header" | tr -d ' (' | sort -u > "$out/named.txt"
if [ ! -s "$out/named.txt" ]; then
    echo "the header names no FFI symbol" >&2
    exit 1
fi
missing="$(comm -23 "$out/named.txt" "$out/exported.txt")"
if [ -n "$missing" ]; then
    echo "symbols named by the header but not exported by the library:" >&2
    echo "$missing" >&2
    exit 1
fi
echo "header names $(wc -l < "$out/named.txt") symbols, all exported"

golden="$root/mobile/bindings/swift"
if [ "$update_golden" = 1 ]; then
    rm -rf "$golden"
    mkdir -p "$golden"
    cp "$out/swift/"* "$golden/"
    echo "golden Swift bindings updated"
elif ! diff -ru "$golden" "$out/swift"; then
    echo "generated Swift bindings differ from mobile/bindings/swift" >&2
    echo "(an API change? rerun with --update-golden and commit the result)" >&2
    exit 1
fi
echo "== bindings in $out"
