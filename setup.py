"""gpuscope: torch.profiler's API without torch, and a TensorBoard plugin that reads its traces."""
from setuptools import find_packages, setup

setup(
    name="gpuscope",
    version="0.1.0",
    description="A profiler for Python GPU programs (torch.profiler API without PyTorch) "
    "and a fast, offline TensorBoard plugin for Kineto traces",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["profiler_core", "profiler_core.*", "tb_plugin", "tb_plugin.*"]),
    package_data={"tb_plugin": ["static/*", "static/**/*"]},
    include_package_data=True,
    install_requires=[
        "numpy>=1.23",
        "pandas>=2.0",
        "msgspec>=0.18",
        "isal>=1.6",
        "werkzeug>=2.2",
        "tensorboard>=2.14",
        "fsspec>=2023.1",
    ],
    extras_require={
        "cuda": ["cupti-python>=12.6", "pycuda>=2024.1"],
        "mpi": ["mpi4py>=3.1"],
        "s3": ["s3fs>=2023.1"],
        "gcs": ["gcsfs>=2023.1"],
        "azure": ["adlfs>=2023.1"],
        "dask": ["dask[distributed]>=2024.1"],
        "test": ["pytest>=7.4", "playwright>=1.40", "moto[server]>=5.0", "s3fs>=2023.1",
                 "dask[distributed]>=2024.1"],
    },
    entry_points={
        "tensorboard_plugins": ["gpuscope = tb_plugin.plugin:GpuscopeLoader"],
        "console_scripts": ["gpuscope = tb_plugin.summaries.cli:main"],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Software Development :: Debuggers",
    ],
)
