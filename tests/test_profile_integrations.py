"""The integrations registry: installed while recording if the library is (or gets) imported."""

import sys

import pytest

from profiler_core import ProfilerActivity, integrations, profile, schedule
from profiler_core.integrations import Integration

CPU = [ProfilerActivity.CPU]


@pytest.fixture
def fake(tmp_path, monkeypatch):
    log = []
    name = "gpuscope_fake_lib_" + tmp_path.name.replace("-", "_")
    (tmp_path / f"{name}.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    integ = Integration(name, install=lambda: log.append("install"), uninstall=lambda: log.append("uninstall"))
    integrations.register(integ)
    yield name, log
    integrations.unregister(name)
    sys.modules.pop(name, None)


def test_not_installed_if_library_never_imported(fake):
    name, log = fake
    with profile(activities=CPU):
        pass
    assert log == [] and name not in sys.modules


def test_installed_while_recording_when_already_imported(fake):
    name, log = fake
    __import__(name)
    with profile(activities=CPU, schedule=schedule(wait=1, warmup=1, active=1)) as p:
        assert log == []  # NONE phase: not recording
        p.step()
        assert log == []  # WARMUP: not recording either
        p.step()
        assert log == ["install"] and integrations.installed() == [name]
        p.step()
        assert log == ["install", "uninstall"]
    assert integrations.installed() == []


def test_installed_when_imported_during_recording(fake):
    name, log = fake
    with profile(activities=CPU):
        mod = __import__(name)
        assert mod.VALUE == 1
        assert log == ["install"]
    assert log == ["install", "uninstall"]
    assert not any(type(f).__name__ == "_ImportWatcher" for f in sys.meta_path)


def test_failing_install_is_a_warning(fake):
    name, _ = fake

    def bad():
        raise RuntimeError("library changed its API")

    integrations.register(Integration(name, install=bad, uninstall=lambda: None))
    __import__(name)
    with pytest.warns(RuntimeWarning, match="could not instrument .*library changed its API"):
        with profile(activities=CPU):
            pass
    assert integrations.installed() == []


def test_register_rejects_other_objects():
    with pytest.raises(TypeError, match="expects an Integration"):
        integrations.register(("mod", None, None))
