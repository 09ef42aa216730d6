#!/usr/bin/env bash
# Builds the C extensions (the native trace reader, profiler_core/trace/read/_native.c, and the op tree's
# nesting pass, profiler_core/analysis/stages/_tree.c) with the system C compiler, for a source tree that is
# not pip-installed: `.ci/build_native.sh OUT_DIR [extra compiler flags...]` writes each next to its source
# under OUT_DIR (profiler_core/trace/read/_native<EXT_SUFFIX>, ...). OUT_DIR "." builds them in place.
# (pip install builds them through setup.py; this is for tests and the sanitizer build.)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: .ci/build_native.sh OUT_DIR [CFLAGS...]}
shift
py=${PYTHON:-python3}
inc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
suffix=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
for src in profiler_core/trace/read/_native.c profiler_core/analysis/stages/_tree.c; do
  dst="$out/${src%.c}$suffix"
  mkdir -p "$(dirname "$dst")"
  ${CC:-gcc} -O3 -g -Wall -Wextra -Wno-missing-field-initializers -fPIC -shared -I"$inc" "$@" "$src" -o "$dst"
  echo "$dst"
done
