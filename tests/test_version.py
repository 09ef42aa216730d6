"""One version: pyproject.toml's, read at run time from the installed distribution's metadata."""

import importlib.metadata
import re

import pytest

import profiler_core
from profiler_core import _version
from tb_plugin.summaries.cli import main


def test_version_is_the_installed_distributions():
    try:
        expected = importlib.metadata.version("gpuscope")
    except importlib.metadata.PackageNotFoundError:
        expected = _version.UNKNOWN
    assert profiler_core.__version__ == expected
    assert re.fullmatch(r"\d+(\.\d+)*([ab]|rc)?\d*(\.post\d+)?(\.dev\d+)?(\+[\w.]+)?", expected)


def test_version_without_an_installed_distribution(monkeypatch):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert _version.get_version() == "0+unknown"


def test_cli_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    # the version's line first; then the C extensions' detail (tests/test_first_hour_setup.py)
    assert capsys.readouterr().out.splitlines()[0] == f"gpuscope {profiler_core.__version__}"


def test_cli_without_a_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main([])
    assert e.value.code == 2
    assert "usage: gpuscope" in capsys.readouterr().err
