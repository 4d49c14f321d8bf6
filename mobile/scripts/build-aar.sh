#!/usr/bin/env bash
# Builds the Android library (AAR) of the Cellbind SDK for arm64-v8a, armeabi-v7a and x86_64:
#   OUT_DIR/android/           an Android library module layout: src/main/AndroidManifest.xml,
#                              src/main/kotlin (the generated bindings),
#                              src/main/jniLibs/<abi>/libcellbind_mobile.so, consumer-rules.pro
#   OUT_DIR/maven/dev/cellbind/cellbind-mobile-android/<version>/
#                              cellbind-mobile-android-<version>.aar + .pom (+ .sha256)
#
# The library is built with cargo-ndk and the size-first `mobile` profile (16 KB ELF page
# alignment on the 64-bit ABIs, which Android 15 devices with 16 KB pages need); the Kotlin
# bindings are generated from the unstripped arm64-v8a library, compiled by the pinned kotlinc
# (the same classes as the JVM jar), and each ABI's library is shipped stripped by the NDK's
# llvm-strip. The AAR is assembled by zip (AndroidManifest.xml, classes.jar, jni/<abi>/,
# proguard.txt, an empty R.txt): it has no Android resources, so the Android Gradle plugin would
# add nothing but needs an Android SDK, Gradle and the plugin to do it. PACKAGING.md explains.
#
# usage: build-aar.sh [--check] [OUT_DIR]      (default OUT_DIR: $CARGO_TARGET_DIR/aar)
#   --check  prints which of the required tools are present, and exits non-zero if one is not.
# Needs: rustup with the three Android targets, cargo-ndk, the Android NDK r27 or newer
# (ANDROID_NDK_HOME, ANDROID_NDK_ROOT, or the newest of $ANDROID_HOME/ndk/*), python3, unzip,
# a JDK/JRE 17, JNA (compile time only; JNA_JAR overrides), npm (the pinned Kotlin compiler).
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

ndk_min=27
cargo_ndk_min="3.5"
# ABI -> Rust target
abis=(arm64-v8a armeabi-v7a x86_64)
declare -A triple=([arm64-v8a]=aarch64-linux-android [armeabi-v7a]=armv7-linux-androideabi [x86_64]=x86_64-linux-android)
android_dir="$CB_ROOT/mobile/android"
# The API level: the manifest's minSdkVersion, which cargo-ndk links against.
api="$(sed -n 's/.*android:minSdkVersion="\([0-9]*\)".*/\1/p' "$android_dir/AndroidManifest.xml")"
[ -n "$api" ] || cb_die "no minSdkVersion in $android_dir/AndroidManifest.xml"

# The NDK: ANDROID_NDK_HOME, ANDROID_NDK_ROOT, or the newest under the SDK's ndk/ directory.
find_ndk() {
    local d sdk
    for d in "${ANDROID_NDK_HOME:-}" "${ANDROID_NDK_ROOT:-}"; do
        [ -n "$d" ] && [ -f "$d/source.properties" ] && { echo "$d"; return; }
    done
    for sdk in "${ANDROID_HOME:-}" "${ANDROID_SDK_ROOT:-}"; do
        [ -n "$sdk" ] && [ -d "$sdk/ndk" ] || continue
        d="$(find "$sdk/ndk" -mindepth 1 -maxdepth 1 -type d | sort -V | tail -n 1)"
        [ -n "$d" ] && [ -f "$d/source.properties" ] && { echo "$d"; return; }
    done
    return 0
}

[ "$CB_CHECK" = 1 ] && echo "build-aar.sh: required tools"
for tool in cargo rustup python3 unzip java; do
    if cb_have "$tool"; then cb_report "$tool" 0 "$(command -v "$tool")"; else cb_report "$tool" 1 "not on PATH"; fi
done
android_triples=()
for abi in "${abis[@]}"; do android_triples+=("${triple[$abi]}"); done
cb_report_rust_targets "${android_triples[@]}"
ndk_version=""
if cb_have cargo && cargo ndk --version >/dev/null 2>&1; then
    v="$(cargo ndk --version | awk '{print $NF}')"
    if [ "$(printf '%s\n%s\n' "$cargo_ndk_min" "$v" | sort -V | head -n 1)" = "$cargo_ndk_min" ]; then
        cb_report cargo-ndk 0 "$v"
    else
        cb_report cargo-ndk 1 "$v is older than $cargo_ndk_min: cargo install cargo-ndk"
    fi
else
    cb_report cargo-ndk 1 "cargo install cargo-ndk (>= $cargo_ndk_min)"
fi
ndk="$(find_ndk)"
if [ -z "$ndk" ]; then
    cb_report "Android NDK r$ndk_min+" 1 "install the NDK (sdkmanager \"ndk;27.2.12479018\") and set ANDROID_NDK_HOME"
else
    ndk_version="$(sed -n 's/^Pkg.Revision *= *//p' "$ndk/source.properties")"
    if [ "${ndk_version%%.*}" -ge "$ndk_min" ] 2>/dev/null; then
        cb_report "Android NDK r$ndk_min+" 0 "$ndk_version at $ndk"
    else
        cb_report "Android NDK r$ndk_min+" 1 "found ${ndk_version:-an unknown version} at $ndk; r$ndk_min or newer is needed"
    fi
fi
llvm_strip=""
if [ -n "$ndk" ]; then
    llvm_strip="$(find "$ndk/toolchains/llvm/prebuilt" -maxdepth 3 -path '*/bin/llvm-strip' 2>/dev/null |
        head -n 1 || true)"
    if [ -n "$llvm_strip" ]; then cb_report "NDK llvm-strip" 0 "$llvm_strip"
    else cb_report "NDK llvm-strip" 1 "not found under $ndk/toolchains/llvm/prebuilt"; fi
fi
if [ -f "$CB_JNA_JAR" ]; then cb_report "JNA jar" 0 "$CB_JNA_JAR"
else cb_report "JNA jar" 1 "apt-get install libjna-java, or set JNA_JAR"; fi
kotlinc_path="$CB_TOOLS/node_modules/kotlin-compiler/bin/kotlinc"
if [ -x "$kotlinc_path" ]; then cb_report "kotlinc $CB_KOTLIN_VERSION" 0 "$kotlinc_path"
elif cb_have npm; then cb_report "kotlinc $CB_KOTLIN_VERSION" 0 "installed on first use with npm"
else cb_report "kotlinc $CB_KOTLIN_VERSION" 1 "needs npm to install kotlin-compiler@$CB_KOTLIN_VERSION"; fi
# An Android build must not need JNI initialisation from the app: rustls-platform-verifier
# does on Android (and its Kotlin half is not in this AAR). The SDK's Android dependencies avoid
# it (sdk/Cargo.toml); this keeps it, and any crate that calls into the JVM, out of the graph.
if cb_have cargo; then
    jni_crates="$(cargo tree --quiet --locked --manifest-path "$CB_ROOT/Cargo.toml" -p cellbind-mobile \
        --target aarch64-linux-android -e normal --prefix none 2>/dev/null |
        awk '$1 ~ /^(rustls-platform-verifier|rustls-platform-verifier-android|jni|jni-sys)$/ {print $1}' |
        sort -u | paste -sd, - || true)"
    if [ -n "$jni_crates" ]; then
        cb_report "TLS verifier without JNI" 1 "$jni_crates in the Android graph: the platform verifier needs JNI initialisation and Kotlin classes this AAR lacks (PACKAGING.md)"
    else
        cb_report "TLS verifier without JNI" 0 "the Android graph has no rustls-platform-verifier and no jni"
    fi
fi

cb_checks_done build-aar.sh "the AAR"

mkdir -p "${out:-$CB_TARGET/aar}"
out="$(realpath "${out:-$CB_TARGET/aar}")"
cd "$CB_ROOT"
export ANDROID_NDK_HOME="$ndk"
version="$(cb_version)"

echo "== building the library for ${abis[*]} (profile mobile, API $api, NDK $ndk_version)"
# 16 KB page alignment for the 64-bit ABIs (NDK r27 does not default to it; r28 does).
export CARGO_TARGET_AARCH64_LINUX_ANDROID_RUSTFLAGS="-C link-arg=-Wl,-z,max-page-size=16384"
export CARGO_TARGET_X86_64_LINUX_ANDROID_RUSTFLAGS="-C link-arg=-Wl,-z,max-page-size=16384"
targets=()
for abi in "${abis[@]}"; do targets+=(-t "$abi"); done
start=$SECONDS
cargo ndk "${targets[@]}" --platform "$api" build --locked -p cellbind-mobile --profile mobile
echo "cargo ndk took $((SECONDS - start)) s"

module="$out/android"
rm -rf "$module" "$out/staging"
mkdir -p "$module/src/main" "$out/staging/aar" "$out/staging/classes"

echo "== generating and compiling the Kotlin bindings"
cb_generate kotlin "$CB_TARGET/${triple[arm64-v8a]}/mobile/libcellbind_mobile.so" "$module/src/main/kotlin"
cb_compile_kotlin "$module/src/main/kotlin" "$out/staging/classes"
cb_zip "$out/staging/aar/classes.jar" "$out/staging/classes"

echo "== packing the AAR"
cp "$android_dir/AndroidManifest.xml" "$module/src/main/AndroidManifest.xml"
cp "$android_dir/consumer-rules.pro" "$module/consumer-rules.pro"
cp "$android_dir/AndroidManifest.xml" "$out/staging/aar/AndroidManifest.xml"
cp "$android_dir/consumer-rules.pro" "$out/staging/aar/proguard.txt"
: >"$out/staging/aar/R.txt"
for abi in "${abis[@]}"; do
    mkdir -p "$module/src/main/jniLibs/$abi" "$out/staging/aar/jni/$abi"
    shipped="$module/src/main/jniLibs/$abi/libcellbind_mobile.so"
    cb_strip "$llvm_strip" "$CB_TARGET/${triple[$abi]}/mobile/libcellbind_mobile.so" "$shipped"
    cp "$shipped" "$out/staging/aar/jni/$abi/"
    # For comparison only: the budget is the x86_64 Linux library's (the Android libraries differ:
    # bundled roots instead of the platform verifier, 16 KB page alignment).
    cb_size_report "stripped, $abi" "$(stat -c %s "$shipped")" || true
done
cb_zip "$out/staging/$CB_ARTIFACT_ANDROID.aar" "$out/staging/aar"
cb_pom "$CB_ARTIFACT_ANDROID" aar "$version" >"$out/staging/pom.xml"
cb_maven_put "$out/maven" "$CB_ARTIFACT_ANDROID" "$version" aar "$out/staging/$CB_ARTIFACT_ANDROID.aar" "$out/staging/pom.xml"
aar="$CB_MAVEN_PATH"
rm -rf "$out/staging"
echo "module layout: $module"
echo "aar size: $(stat -c %s "$aar") bytes"
echo "aar: $aar"
