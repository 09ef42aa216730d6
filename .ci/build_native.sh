#!/usr/bin/env bash
# Builds the native trace reader (profiler_core/trace/read/_native.c) with the system C compiler, for
# a source tree that is not pip-installed: `.ci/build_native.sh OUT_DIR [extra compiler flags...]`
# writes OUT_DIR/profiler_core/trace/read/_native<EXT_SUFFIX>. OUT_DIR "." builds it in place.
# (pip install builds it through setup.py; this is for tests and the sanitizer build.)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: .ci/build_native.sh OUT_DIR [CFLAGS...]}
shift
py=${PYTHON:-python3}
inc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
suffix=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
mkdir -p "$out/profiler_core/trace/read"
${CC:-gcc} -O3 -g -Wall -Wextra -Wno-missing-field-initializers -fPIC -shared -I"$inc" "$@" \
  profiler_core/trace/read/_native.c -o "$out/profiler_core/trace/read/_native$suffix"
echo "$out/profiler_core/trace/read/_native$suffix"
