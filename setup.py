"""The optional native trace reader (profiler_core/trace/read/_native.c); everything else is in pyproject.toml.

The extension is optional: where no C compiler is found the package installs without it and reads
traces with its Python reader. Build it in a source tree with `python3 setup.py build_ext --inplace`.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "profiler_core.trace.read._native",
            sources=["profiler_core/trace/read/_native.c"],
            optional=True,
            extra_compile_args=["-O3"],
        )
    ]
)
