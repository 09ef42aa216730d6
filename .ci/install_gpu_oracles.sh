#!/usr/bin/env bash
# The real CUDA-side packages the oracle tests compare gpuscope with, none of which needs a GPU:
#   .venvs/cuda-headers/cu12|cu13/cuda_occupancy.h  NVIDIA's occupancy calculator (nvidia-cuda-runtime wheels)
#   .venvs/cupti12, .venvs/cupti13                  cupti-python 12.x and 13.x (one major per --target dir)
#   .venvs/pycuda                                   PyCUDA from ../shared/wheels (when that wheel is there)
# Each piece is installed only if absent (CI caches .venvs). A piece that fails to install is named; under
# CI (CI=true) the script then exits 1 (the tests would fail without it), locally its tests skip.
set -uo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
failed=0
miss() { echo "ci: $*" >&2; failed=1; }
dest=.venvs
mkdir -p "$dest"

header() {  # header <tag> <requirement> <path of cuda_occupancy.h inside the wheel>
  local tag=$1 req=$2 inner=$3 out="$dest/cuda-headers/$1"
  [ -f "$out/cuda_occupancy.h" ] && return 0
  local tmp; tmp=$(mktemp -d)
  if python3 -m pip download -q --no-deps --only-binary=:all: "$req" -d "$tmp" >/dev/null 2>&1; then
    mkdir -p "$out"
    python3 - "$tmp" "$inner" "$out" <<'PY' || miss "no cuda_occupancy.h in $req"
import sys, zipfile, glob, pathlib
whl = glob.glob(sys.argv[1] + "/*.whl")[0]
with zipfile.ZipFile(whl) as z:
    pathlib.Path(sys.argv[3], "cuda_occupancy.h").write_bytes(z.read(sys.argv[2]))
    pathlib.Path(sys.argv[3], "SOURCE").write_text(whl.rsplit("/", 1)[-1] + "\n")
PY
  else
    miss "$req not downloadable; the occupancy oracle test for $tag will skip"
  fi
  rm -rf "$tmp"
}
header cu12 "nvidia-cuda-runtime-cu12" nvidia/cuda_runtime/include/cuda_occupancy.h
header cu13 "nvidia-cuda-runtime>=13,<14" nvidia/cu13/include/cuda_occupancy.h

target() {  # target <dir> <requirement...>: pip install --target, kept only if it succeeded
  local dir=$1; shift
  [ -d "$dest/$dir" ] && return 0
  python3 -m pip install -q --target "$dest/$dir.tmp" "$@" >/dev/null 2>&1 \
    && mv "$dest/$dir.tmp" "$dest/$dir" \
    || { miss "$* not installable; its oracle tests will skip"; rm -rf "$dest/$dir.tmp"; }
}
target cupti12 "cupti-python>=12,<13"
target cupti13 "cupti-python>=13,<14"
pycuda_whl=$(ls ../shared/wheels/pycuda-*-cp"$(python3 -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')"-*.whl 2>/dev/null | head -n 1 || true)
if [ -n "$pycuda_whl" ]; then target pycuda "$pycuda_whl"
elif [ ! -d "$dest/pycuda" ]; then miss "no PyCUDA wheel for this Python in ../shared/wheels; the real-PyCUDA tests will skip"; fi
if [ "$failed" = 1 ]; then
  case "${CI:-}" in [Tt][Rr][Uu][Ee]|1|[Yy][Ee][Ss]) echo "ci: GPU oracles missing under CI=true" >&2; exit 1 ;; esac
fi
exit 0
