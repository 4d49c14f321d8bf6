#!/usr/bin/env bash
# Builds the Python wheel of the Cellbind SDK (`cellbind-<version>-py3-none-<platform>.whl`):
# maturin (uniffi mode, mobile/pyproject.toml) builds cellbind-mobile with the size-first
# `mobile` profile and generates the Python module from that unstripped library with the
# workspace's uniffi-bindgen; this script then replaces the library inside the wheel with a
# `strip --strip-all` copy (the metadata uniffi-bindgen reads is no longer needed once the
# module exists) and rewrites the wheel's RECORD to match.
#
# usage: build-wheel.sh OUT_DIR
# Prints the wheel's path on the last line ("wheel: PATH") and the shipped library's size.
# On x86_64 Linux, exits 1 when that library is over the size budget (CB_SIZE_BUDGET in lib.sh),
# after writing the wheel and printing its path (test-bindings.sh still tests it, and fails).
# Needs: maturin 1.16.0 (`python3 -m pip install maturin==1.16.0`), binutils' strip.
set -euo pipefail

maturin_version="1.16.0"
if [ $# -ne 1 ]; then
    echo "usage: $0 OUT_DIR" >&2
    exit 2
fi
mkdir -p "$1"
out="$(realpath "$1")"
# shellcheck source=mobile/scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$CB_ROOT"

have="$(maturin --version 2>/dev/null || true)"
if [ "$have" != "maturin $maturin_version" ]; then
    echo "needs maturin $maturin_version (found: ${have:-none}): python3 -m pip install maturin==$maturin_version" >&2
    exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "== building the wheel (profile mobile)"
start=$SECONDS
(cd mobile && maturin build --locked --quiet --out "$work/built")
echo "maturin build took $((SECONDS - start)) s"
built=("$work"/built/cellbind-*.whl)
if [ ${#built[@]} -ne 1 ] || [ ! -f "${built[0]}" ]; then
    echo "expected one cellbind wheel, maturin produced: ${built[*]}" >&2
    exit 1
fi
wheel_name="$(basename "${built[0]}")"

echo "== stripping the shipped library"
python3 - "${built[0]}" "$out/$wheel_name" "$work" <<'PY'
"""Copy a wheel, replacing every shared library in it by a `strip --strip-all` copy and
rewriting its RECORD lines (sha256, size), as the wheel format requires."""
import base64, csv, hashlib, io, os, subprocess, sys, zipfile

src, dst, work = sys.argv[1:4]
with zipfile.ZipFile(src) as zin:
    infos = zin.infolist()
    data = {i.filename: zin.read(i.filename) for i in infos}

libs = [n for n in data if n.endswith(".so")]
if not libs:
    sys.exit("the wheel holds no shared library")
for name in libs:
    raw = os.path.join(work, "lib.so")
    stripped = os.path.join(work, "lib.stripped.so")
    with open(raw, "wb") as f:
        f.write(data[name])
    subprocess.run(["strip", "--strip-all", "-o", stripped, raw], check=True)
    with open(stripped, "rb") as f:
        data[name] = f.read()
    print(f"{name}: {len(open(raw, 'rb').read())} -> {len(data[name])} bytes")

record = next(n for n in data if n.endswith(".dist-info/RECORD"))
rows = []
for row in csv.reader(io.StringIO(data[record].decode())):
    if row and row[0] in libs:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data[row[0]]).digest()).rstrip(b"=")
        row = [row[0], "sha256=" + digest.decode(), str(len(data[row[0]]))]
    rows.append(row)
buf = io.StringIO()
csv.writer(buf, lineterminator="\n").writerows(rows)
data[record] = buf.getvalue().encode()

tmp = dst + ".tmp"
with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
    for info in infos:  # same order and attributes (RECORD stays last)
        zout.writestr(info, data[info.filename], compress_type=zipfile.ZIP_DEFLATED)
os.replace(tmp, dst)
PY

lib_size="$(python3 - "$out/$wheel_name" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    print(sum(i.file_size for i in z.infolist() if i.filename.endswith(".so")))
PY
)"
within_budget=1
cb_size_report "stripped, x86_64" "$lib_size" || within_budget=0
echo "wheel size: $(stat -c %s "$out/$wheel_name") bytes"
echo "wheel: $out/$wheel_name"
if [ "$within_budget" = 0 ] && cb_budget_applies; then
    cb_over_budget "$(basename "$0")"
    exit 1
fi
