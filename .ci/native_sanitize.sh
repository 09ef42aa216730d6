#!/usr/bin/env bash
# The C extensions under AddressSanitizer and UndefinedBehaviorSanitizer: builds the native trace reader
# (profiler_core/trace/read/_native.c) and the op tree's C pass (profiler_core/analysis/stages/_tree.c) once more
# with them into a temporary copy of profiler_core and runs their differential and fuzz tests
# (tests/test_native_reader.py, tests/test_op_tree_native.py, and the readers' hang fuzz loop
# tests/test_reader_hostile_documents.py) against that build. Any read past a
# buffer, leak-free crash or undefined behaviour aborts the run. Needs gcc and the installed package's
# dependencies (.ci/run installs them first). GPUSCOPE_NATIVE_FUZZ_SECONDS and
# GPUSCOPE_READER_FUZZ_SECONDS set the fuzz loops' lengths.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r profiler_core "$tmp/"
rm -f "$tmp"/profiler_core/trace/read/_native*.so "$tmp"/profiler_core/analysis/stages/_tree*.so
.ci/build_native.sh "$tmp" -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all >/dev/null
asan=$(${CC:-gcc} -print-file-name=libasan.so)
[ -f "$asan" ] || { echo "native_sanitize: libasan.so not found (gcc without AddressSanitizer)" >&2; exit 1; }
export LD_PRELOAD="$asan"
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:allocator_may_return_null=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
repo=$PWD
cd "$tmp" # first on sys.path: the sanitized build, not an installed or in-place one, is what the tests import
for mod in profiler_core.trace.read._native profiler_core.analysis.stages._tree; do
  "$py" -c 'import importlib, sys; sys.exit(not importlib.import_module(sys.argv[2]).__file__.startswith(sys.argv[1]))' \
    "$tmp" "$mod" || { echo "native_sanitize: the tests would not import the sanitized build of $mod" >&2; exit 1; }
done
export GPUSCOPE_NATIVE_FUZZ_SECONDS=${GPUSCOPE_NATIVE_FUZZ_SECONDS:-30}
# the readers' hostile-input loop (issue 40): long escaped strings and backslash runs, windows cut inside them,
# each read in a child process (the sanitized build too) that must end; bounded like the byte-mutation loop
export GPUSCOPE_READER_FUZZ_SECONDS=${GPUSCOPE_READER_FUZZ_SECONDS:-30}
"$py" -m pytest -q -p no:cacheprovider --import-mode=append --rootdir="$repo" "$repo/tests/test_native_reader.py" \
  "$repo/tests/test_op_tree_native.py" "$repo/tests/test_reader_hostile_documents.py"
