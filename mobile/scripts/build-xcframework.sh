#!/usr/bin/env bash
# Builds the Swift package of the Cellbind SDK for iOS (macOS with Xcode only):
#   OUT_DIR/Cellbind/Package.swift                 (from mobile/swift/Package.swift)
#   OUT_DIR/Cellbind/Sources/Cellbind/cellbind.swift   the uniffi-generated Swift API
#   OUT_DIR/Cellbind/cellbindFFI.xcframework       static libraries: ios-arm64 (devices) and
#                                                  ios-arm64_x86_64-simulator, with the C header
#                                                  and module map of the FFI module cellbindFFI
#   OUT_DIR/cellbindFFI.xcframework.zip (+ .sha256) for a remote binaryTarget(url:checksum:)
#
# The static libraries are built with the size-first `mobile` profile (`cargo rustc
# --crate-type staticlib`: the crate itself is cdylib-only); the Swift bindings are generated from
# the unstripped aarch64-apple-ios library. The libraries are not stripped here: an archive
# needs its symbols to be linked; the app's link dead-strips and Xcode strips the app binary.
#
# usage: build-xcframework.sh [--check] [OUT_DIR]      (default OUT_DIR: $CARGO_TARGET_DIR/swift)
#   --check  prints which of the required tools are present, and exits non-zero if one is not.
# Needs: macOS, Xcode 15 or newer (xcodebuild, lipo, swift), rustup with the targets
# aarch64-apple-ios, aarch64-apple-ios-sim and x86_64-apple-ios. macOS's bash 3.2 is enough.
set -euo pipefail
# shellcheck source=mobile/scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

out=""
for a in "$@"; do
    case "$a" in
        --check) CB_CHECK=1 ;;
        -*) echo "usage: $0 [--check] [OUT_DIR]" >&2; exit 2 ;;
        *) out="$a" ;;
    esac
done

xcode_min=15
targets=(aarch64-apple-ios aarch64-apple-ios-sim x86_64-apple-ios)
template="$CB_ROOT/mobile/swift/Package.swift"
# The deployment target: the template's `.iOS(.vNN)`.
ios_min="$(sed -n 's/.*\.iOS(\.v\([0-9]*\)).*/\1/p' "$template")"
[ -n "$ios_min" ] || cb_die "no .iOS(.vNN) platform in $template"

[ "$CB_CHECK" = 1 ] && echo "build-xcframework.sh: required tools"
if [ "$(uname -s)" = Darwin ]; then cb_report macOS 0 "$(sw_vers -productVersion 2>/dev/null || uname -r)"
else cb_report macOS 1 "this is $(uname -s): xcodebuild and the iOS SDKs exist only on macOS"; fi
if cb_have xcodebuild && xcodebuild -version >/dev/null 2>&1; then
    xv="$(xcodebuild -version | sed -n 's/^Xcode //p')"
    if [ "${xv%%.*}" -ge "$xcode_min" ] 2>/dev/null; then cb_report "Xcode $xcode_min+ (xcodebuild)" 0 "$xv"
    else cb_report "Xcode $xcode_min+ (xcodebuild)" 1 "found Xcode $xv"; fi
else
    cb_report "Xcode $xcode_min+ (xcodebuild)" 1 "install Xcode and run xcode-select -s /Applications/Xcode.app"
fi
for tool in lipo swift cargo rustup; do
    if cb_have "$tool"; then cb_report "$tool" 0 "$(command -v "$tool")"
    else cb_report "$tool" 1 "not on PATH"; fi
done
cb_report_rust_targets "${targets[@]}"

cb_checks_done build-xcframework.sh "the XCFramework"

mkdir -p "${out:-$CB_TARGET/swift}"
out="$(realpath "${out:-$CB_TARGET/swift}")"
cd "$CB_ROOT"
export IPHONEOS_DEPLOYMENT_TARGET="$ios_min.0"

echo "== building the static libraries for ${targets[*]} (profile mobile, iOS $ios_min)"
for t in "${targets[@]}"; do
    # rustc writes the libraries an app must link with the archive to a stable path (kept
    # when cargo finds the build fresh).
    cargo rustc --locked -p cellbind-mobile --profile mobile --target "$t" --crate-type staticlib -- \
        --print "native-static-libs=$CB_TARGET/$t/mobile/native-static-libs.txt"
done
lib() { echo "$CB_TARGET/$1/mobile/libcellbind_mobile.a"; }

# Every framework and library the archive needs must be in Package.swift's linkerSettings
# (linkedFramework, linkedLibrary); libSystem (-lSystem -lc -lm) is always linked.
needs="$(cat "$CB_TARGET/aarch64-apple-ios/mobile/native-static-libs.txt")"
read -ra words <<<"$needs"
for ((i = 0; i < ${#words[@]}; i++)); do
    case "${words[$i]}" in
        -framework)
            f="${words[$((i + 1))]}"
            grep -q "linkedFramework(\"$f\")" "$template" ||
                cb_die "the library links framework $f, which $template does not list (native-static-libs: $needs)"
            ;;
        -lSystem | -lc | -lm) ;;
        -l*)
            l="${words[$i]#-l}"
            grep -q "linkedLibrary(\"$l\")" "$template" ||
                cb_die "the library links -l$l, which $template does not list (native-static-libs: $needs)"
            ;;
    esac
done

work="$out/work"
pkg="$out/Cellbind"
rm -rf "$work" "$pkg"
# The header and module map sit in a directory named after the module: Xcode copies every
# XCFramework's headers into one include directory, where two top-level module.modulemap files
# (ours and another framework's) would collide; clang finds <dir>/cellbindFFI/module.modulemap
# when resolving `import cellbindFFI`.
headers="$work/headers/cellbindFFI"
mkdir -p "$headers" "$work/sim" "$pkg/Sources/Cellbind"

echo "== generating the Swift bindings"
cb_generate swift "$(lib aarch64-apple-ios)" "$work/swift"
cp "$work/swift/cellbind.swift" "$pkg/Sources/Cellbind/"
cp "$work/swift/cellbindFFI.h" "$headers/"
cp "$work/swift/cellbindFFI.modulemap" "$headers/module.modulemap"

echo "== creating the XCFramework"
lipo -create "$(lib aarch64-apple-ios-sim)" "$(lib x86_64-apple-ios)" -output "$work/sim/libcellbind_mobile.a"
xcodebuild -create-xcframework \
    -library "$(lib aarch64-apple-ios)" -headers "$work/headers" \
    -library "$work/sim/libcellbind_mobile.a" -headers "$work/headers" \
    -output "$pkg/cellbindFFI.xcframework"
cp "$template" "$pkg/Package.swift"

zip="$out/cellbindFFI.xcframework.zip"
rm -f "$zip"
(cd "$pkg" && ditto -c -k --sequesterRsrc --keepParent cellbindFFI.xcframework "$zip")
checksum="$(swift package compute-checksum "$zip")"
echo "$checksum" >"$zip.sha256"
rm -rf "$work"
for t in "${targets[@]}"; do
    echo "static library $t: $(stat -f %z "$(lib "$t")") bytes"
done
echo "package: $pkg"
echo "xcframework zip: $zip (checksum $checksum)"
