"""Auto-instrumentation of libraries: a registry of ``Integration(module_name, install, uninstall)``.

The profiler calls ``activate()`` when a trace starts recording CPU activity and ``deactivate()``
when it stops. An integration is installed only if its library (``module_name``) is already
imported, or as soon as it gets imported while recording (an import hook watches for it); it is
uninstalled at ``deactivate()``, which must leave the library exactly as it was. A failing
install/uninstall becomes one warning, never an error in the user's program.

The built-in integration modules (``BUILTIN``) are imported lazily by ``activate()``; each
registers itself at import and must not import its library at import time.
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass

BUILTIN = ("profiler_core.integrations.pycuda_hooks", "profiler_core.integrations.mpi")


@dataclass(frozen=True)
class Integration:
    """How to instrument one library: installed when ``module_name`` is imported and recording."""

    module_name: str
    install: Callable[[], None]
    uninstall: Callable[[], None]


_registry: dict[str, Integration] = {}  # keyed by module_name: a re-registration replaces
_installed: dict[str, Integration] = {}
_lock = threading.RLock()
_active = False
_builtins_loaded = False
_watcher: _ImportWatcher | None = None


def register(integration: Integration) -> None:
    """Add (or replace) the integration for ``integration.module_name``."""
    if not isinstance(integration, Integration):
        raise TypeError(f"register() expects an Integration, got {type(integration).__name__}")
    with _lock:
        _registry[integration.module_name] = integration
        if _active and integration.module_name in sys.modules:
            _install(integration)


def unregister(module_name: str) -> None:
    """Remove the integration for ``module_name`` (uninstalling it first if installed)."""
    with _lock:
        if module_name in _installed:
            _uninstall(_installed[module_name])
        _registry.pop(module_name, None)


def registered() -> list[Integration]:
    """The registered integrations."""
    with _lock:
        return list(_registry.values())


def installed() -> list[str]:
    """Module names whose integration is installed right now."""
    with _lock:
        return list(_installed)


def _warn(message: str) -> None:
    warnings.warn(f"gpuscope: {message}", RuntimeWarning, stacklevel=3)


def _install(integ: Integration) -> None:
    if integ.module_name in _installed:
        return
    try:
        integ.install()
    except Exception as e:  # never take the user's program down
        _warn(f"could not instrument {integ.module_name}: {type(e).__name__}: {e}")
        return
    _installed[integ.module_name] = integ


def _uninstall(integ: Integration) -> None:
    _installed.pop(integ.module_name, None)
    try:
        integ.uninstall()
    except Exception as e:
        _warn(f"could not remove the instrumentation of {integ.module_name}: {type(e).__name__}: {e}")


def _load_builtins() -> None:
    global _builtins_loaded
    if _builtins_loaded:
        return
    _builtins_loaded = True
    for name in BUILTIN:
        try:
            importlib.import_module(name)
        except ImportError as e:
            if getattr(e, "name", None) != name:  # the module exists but failed: say so
                _warn(f"integration {name} failed to import: {e}")
        except Exception as e:
            _warn(f"integration {name} failed to import: {type(e).__name__}: {e}")


class _ImportWatcher(importlib.abc.MetaPathFinder):
    """Installs a pending integration right after its module is imported while recording."""

    def find_spec(self, fullname, path, target=None):
        with _lock:
            if not _active or fullname not in _registry or fullname in _installed:
                return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        orig_exec = loader.exec_module

        class _Loader(importlib.abc.Loader):
            def __getattr__(self, name):  # is_package, get_resource_reader, ...
                return getattr(loader, name)

            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                orig_exec(module)
                with _lock:
                    integ = _registry.get(fullname)
                    if _active and integ is not None:
                        _install(integ)

        spec.loader = _Loader()
        return spec


def activate() -> None:
    """Install every registered integration whose library is imported; watch imports for the rest."""
    global _active, _watcher
    with _lock:
        _load_builtins()
        _active = True
        for name, integ in list(_registry.items()):
            if name in sys.modules:
                _install(integ)
        if _watcher is None:
            _watcher = _ImportWatcher()
            sys.meta_path.insert(0, _watcher)


def deactivate() -> None:
    """Uninstall every installed integration and stop watching imports."""
    global _active, _watcher
    with _lock:
        _active = False
        for integ in list(_installed.values()):
            _uninstall(integ)
        if _watcher is not None:
            try:
                sys.meta_path.remove(_watcher)
            except ValueError:
                pass
            _watcher = None


def is_active() -> bool:
    """True between activate() and deactivate()."""
    return _active
