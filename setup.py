"""The optional C extensions; everything else is in pyproject.toml: the native trace reader
(profiler_core/trace/read/_native.c) and the op tree's nesting pass (profiler_core/analysis/stages/_tree.c).

Both are optional: where no C compiler is found the package installs without them, reads traces with its
Python reader and nests the op tree in numpy. Build them in a source tree with `python3 setup.py build_ext
--inplace` (or `.ci/build_native.sh .`).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "profiler_core.trace.read._native",
            sources=["profiler_core/trace/read/_native.c"],
            optional=True,
            extra_compile_args=["-O3"],
        ),
        Extension(
            "profiler_core.analysis.stages._tree",
            sources=["profiler_core/analysis/stages/_tree.c"],
            optional=True,
            extra_compile_args=["-O3"],
        ),
    ]
)
