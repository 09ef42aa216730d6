"""The mpi4py integration: message description (pure) and wrapping of the real mpi4py types.

Everything that imports mpi4py runs in a subprocess: an initialised MPI in the pytest process
would turn every other test's trace into a distributed one.
"""

import json
import os
import subprocess
import sys
import textwrap
import types
from importlib.util import find_spec

from profiler_core.integrations import mpi as mpi_integration
from profiler_core.integrations.mpi import message_info

from .conftest import requires

needs_mpi4py = requires("mpi4py not installed (pip install mpi4py mpich)" if find_spec("mpi4py") is None else None)


class _Datatype:
    def __init__(self, name, size):
        self._name, self._size = name, size

    def Get_name(self):
        return self._name

    def Get_size(self):
        return self._size


FAKE_MPI = types.SimpleNamespace(IN_PLACE=object(), BOTTOM=object(), Datatype=_Datatype)
DOUBLE = _Datatype("MPI_DOUBLE", 8)


def test_message_info_forms():
    import numpy as np

    a = np.zeros((4, 5), dtype=np.float32)
    assert message_info(a, FAKE_MPI) == (20, "float32", 80)
    assert message_info([a, DOUBLE], FAKE_MPI) == (20, "float32", 80)
    assert message_info([a, 3, DOUBLE], FAKE_MPI) == (3, "float32", 24)
    assert message_info([a, (2, 0), DOUBLE], FAKE_MPI) == (2, "float32", 16)  # (count, displ)
    assert message_info([a, [1, 2, 3], [0, 1, 3], DOUBLE], FAKE_MPI) == (6, "float32", 48)  # vector
    assert message_info([a, [4, 4]], FAKE_MPI) == (8, "float32", 32)  # counts, no type
    assert message_info(bytearray(12), FAKE_MPI) == (12, "uint8", 12)
    assert message_info([bytearray(16), DOUBLE], FAKE_MPI) == (2, "double", 16)
    assert message_info(FAKE_MPI.IN_PLACE, FAKE_MPI) is None
    assert message_info(None, FAKE_MPI) is None


def test_message_info_never_raises():
    class Weird:
        nbytes = "many"
        dtype = None

    assert message_info([object(), "x", DOUBLE], FAKE_MPI) == (-1, "double", -1)
    assert message_info(Weird(), FAKE_MPI) == (-1, "", -1)
    assert message_info([], FAKE_MPI) == (-1, "", -1)
    assert message_info([bytearray(8), [1, "a"]], FAKE_MPI) == (-1, "", -1)


def test_comm_args_collective_p2p_and_barrier():
    import numpy as np

    comm = types.SimpleNamespace(Get_size=lambda: 4)
    x = np.ones(10)
    layout = mpi_integration._COLL_BUF["Allreduce"]
    args = mpi_integration._comm_args(FAKE_MPI, comm, "allreduce", layout, (FAKE_MPI.IN_PLACE, x), {}, False)
    assert args == {
        "Collective name": "allreduce",
        "In msg nelems": 10,
        "Out msg nelems": 10,
        "dtype": "float64",
        "Group size": 4,
        "bytes": 80,
    }
    g = mpi_integration._comm_args(
        FAKE_MPI, comm, "allgather", mpi_integration._COLL_BUF["Allgather"], (x[:2],), {"recvbuf": x[:8]}, False
    )
    assert (g["In msg nelems"], g["Out msg nelems"], g["bytes"]) == (2, 8, 64)
    s = mpi_integration._comm_args(FAKE_MPI, comm, "send", mpi_integration._P2P_BUF["Send"], (x,), {"dest": 3}, False)
    assert s["peer"] == 3 and s["bytes"] == 80
    b = mpi_integration._comm_args(FAKE_MPI, comm, "barrier", mpi_integration._COLL_BUF["Barrier"], (), {}, False)
    assert b == {"Collective name": "barrier", "Group size": 4, "bytes": 0}
    named = types.SimpleNamespace(Get_size=lambda: 2, Get_name=lambda: "rows")
    b = mpi_integration._comm_args(FAKE_MPI, named, "barrier", mpi_integration._COLL_BUF["Barrier"], (), {}, False)
    assert b == {"Collective name": "barrier", "Group size": 2, "bytes": 0, "Process Group Name": "rows"}
    s = mpi_integration._comm_args(FAKE_MPI, named, "send", mpi_integration._P2P_BUF["Send"], (x,), {"dest": 1}, False)
    assert "Process Group Name" not in s  # point-to-point: no group to match across ranks
    p = mpi_integration._comm_args(FAKE_MPI, comm, "bcast", mpi_integration._COLL_OBJ["bcast"], ({"a": 1},), {}, True)
    assert p == {"Collective name": "bcast", "dtype": "object", "Group size": 4}


def test_every_listed_method_has_a_layout():
    assert len(set(mpi_integration.METHODS)) == len(mpi_integration.METHODS)
    for name in (
        "Allreduce",
        "Reduce",
        "Bcast",
        "Allgather",
        "Alltoall",
        "Reduce_scatter",
        "Reduce_scatter_block",
        "Barrier",
        "Send",
        "Recv",
        "Isend",
        "Irecv",
        "Iallreduce",
        "allreduce",
        "bcast",
        "send",
        "recv",
        "Wait",
        "Waitall",
        "Test",
        "wait",
    ):
        assert name in mpi_integration.METHODS


def test_install_without_mpi4py_imported_is_a_no_op(monkeypatch):
    monkeypatch.delitem(sys.modules, "mpi4py.MPI", raising=False)
    mpi_integration.install()
    assert not mpi_integration.is_installed()
    mpi_integration.uninstall()


# --- against the real mpi4py, in a subprocess -------------------------------------------------

STANDIN = """
import contextlib, json, sys
import numpy as np
from mpi4py import MPI
from profiler_core.integrations import mpi as m
REC = []
RECORDING = [True]
@contextlib.contextmanager
def record_op(name, *inputs, args=None):
    REC.append([name, args, len(inputs)])
    yield
m._resolve_core = lambda: ((lambda: RECORDING[0]), record_op, (lambda: True))
"""


def _run(code: str, timeout: float = 60) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "MPI_LOCAL"))}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout, env=env
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


@needs_mpi4py
def test_wraps_and_restores_the_original_objects():
    out = _run(
        STANDIN
        + """
names = [(c, n) for c in (MPI.Comm, MPI.Intracomm, MPI.Request) for n in m.METHODS if n in c.__dict__]
before = {(c.__name__, n): c.__dict__[n] for c, n in names}
m.install(); m.install()                       # idempotent
wrapped = sum(c.__dict__[n] is not before[(c.__name__, n)] for c, n in names)
comm = MPI.COMM_WORLD                          # obtained after install: same type, also wrapped
x = np.arange(6, dtype=np.float64); y = np.empty(6)
comm.Allreduce(x, y)
comm.Allreduce(MPI.IN_PLACE, [y, MPI.DOUBLE])
comm.Bcast(x, root=0)
comm.Barrier()
comm.Reduce_scatter_block(x, y[:6])
dup = comm.Dup(); dup.Allgather(x[:2], y[:2]); dup.Free()
comm.allreduce(3)
r1 = comm.Isend([x, 4, MPI.DOUBLE], dest=0, tag=7); r2 = comm.Irecv(y, source=0, tag=7)
MPI.Request.Waitall([r1, r2])
r = comm.isend({"k": 1}, 0); got = comm.recv(source=0); r.wait()
req = comm.Iallreduce(x, y); req.Wait()
z = np.empty(2); pending = comm.Irecv(z, source=0, tag=99)
# an iterator is passed on intact: nothing was sent yet, so False (an emptied one gives True)
done = MPI.Request.Testall(iter([pending]))
comm.Send(x[:2], dest=0, tag=99); pending.Wait()
RECORDING[0] = False
comm.Barrier()                                 # installed but not recording: nothing recorded
RECORDING[0] = True
m.uninstall()
comm.Barrier()                                 # uninstalled: nothing recorded
restored = all(c.__dict__[n] is before[(c.__name__, n)] for c, n in names)
print(json.dumps({"n": len(names), "wrapped": wrapped, "restored": restored,
                  "installed": m.is_installed(), "rec": REC, "got": got, "y": y.tolist(),
                  "done": done, "z": z.tolist()}))
"""
    )
    res = json.loads(out.strip().splitlines()[-1])
    assert res["n"] > 60 and res["wrapped"] == res["n"] and res["restored"] and not res["installed"]
    rec = {(name, json.dumps(args, sort_keys=True)) for name, args, _ in res["rec"]}
    names = [r[0] for r in res["rec"]]
    assert names == [
        "mpi::Allreduce",
        "mpi::Allreduce",
        "mpi::Bcast",
        "mpi::Barrier",
        "mpi::Reduce_scatter_block",
        "mpi::Allgather",
        "mpi::allreduce",
        "mpi::Isend",
        "mpi::Irecv",
        "mpi::Waitall",
        "mpi::isend",
        "mpi::recv",
        "mpi::wait",
        "mpi::Iallreduce",
        "mpi::Wait",
        "mpi::Irecv",
        "mpi::Testall",
        "mpi::Send",
        "mpi::Wait",
    ]
    assert res["done"] is False and res["z"] == [0.0, 1.0]
    args = {r[0]: r[1] for r in res["rec"]}
    assert args["mpi::Bcast"] == {
        "Collective name": "bcast",
        "In msg nelems": 6,
        "Out msg nelems": 6,
        "dtype": "float64",
        "Group size": 1,
        "bytes": 48,
        "Process Group Name": "MPI_COMM_WORLD",  # the communicator's name: the collective's process group
    }
    assert args["mpi::Isend"]["peer"] == 0 and args["mpi::Isend"]["bytes"] == 32
    assert args["mpi::Waitall"] == {
        "Collective name": "waitall",
        "Requests": 2,
        "Request ops": "irecv,isend",
        "bytes": 32 + 48,
    }
    assert [r[1]["Request ops"] for r in res["rec"] if r[0] == "mpi::Wait"] == ["iallreduce", "irecv"]
    assert args["mpi::Testall"]["Requests"] == 1
    assert args["mpi::Barrier"]["bytes"] == 0
    assert ("mpi::Barrier", json.dumps(args["mpi::Barrier"], sort_keys=True)) in rec
    assert names.count("mpi::Barrier") == 1
    assert res["got"] == {"k": 1} and res["y"] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


@needs_mpi4py
def test_errors_propagate_and_op_is_closed():
    out = _run(
        STANDIN
        + """
m.install()
comm = MPI.COMM_WORLD
comm.Set_errhandler(MPI.ERRORS_RETURN)
try:
    comm.Send(np.ones(2), dest=5)              # no rank 5 in a world of one
    print("no error")
except MPI.Exception as exc:
    print("raised", type(exc).__name__)
m.uninstall()
print(json.dumps(REC))
"""
    )
    lines = out.strip().splitlines()
    assert lines[0] == "raised Exception"
    assert json.loads(lines[-1])[0][0] == "mpi::Send"


@needs_mpi4py
def test_uninitialised_mpi_is_a_warning_not_an_error():
    standin = STANDIN.replace(
        "from mpi4py import MPI", "import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI"
    )
    out = _run(
        standin
        + """
import warnings
from profiler_core import distinfo
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    m.install()
    info = distinfo.distributed_info()
m.uninstall()
print(json.dumps({"info": info, "warnings": [str(x.message) for x in w], "init": MPI.Is_initialized()}))
"""
    )
    res = json.loads(out.strip().splitlines()[-1])
    assert res["info"] is None and res["init"] is False
    assert any("not initialised" in w for w in res["warnings"])


@needs_mpi4py
def test_with_the_real_profiler_installed_while_recording_only(tmp_path):
    trace = tmp_path / "t.json"
    out = _run(f"""
import json
import numpy as np
from profiler_core import profile, ProfilerActivity
from profiler_core.integrations import mpi as m
with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
    from mpi4py import MPI                    # imported while recording: instrumented at import
    orig = None
    comm = MPI.COMM_WORLD
    x = np.ones(8, dtype=np.float32); y = np.empty_like(x)
    comm.Allreduce(x, y)
    comm.Barrier()
    during = m.is_installed()
prof.export_chrome_trace({str(trace)!r})
after = m.is_installed()
wrapped_left = [n for n in m.METHODS for c in (MPI.Comm, MPI.Intracomm, MPI.Request)
                if n in c.__dict__
                and getattr(getattr(c.__dict__[n], "__func__", c.__dict__[n]), "_gpuscope_wrapper", False)]
print(json.dumps({{"during": during, "after": after, "left": wrapped_left}}))
""")
    res = json.loads(out.strip().splitlines()[-1])
    assert res == {"during": True, "after": False, "left": []}
    events = json.loads(trace.read_text())["traceEvents"]
    ops = {e["name"]: e for e in events if e.get("name", "").startswith("mpi::")}
    assert set(ops) == {"mpi::Allreduce", "mpi::Barrier"}
    ar = ops["mpi::Allreduce"]
    assert ar["cat"] == "cpu_op"
    assert {
        k: ar["args"][k] for k in ("Collective name", "In msg nelems", "Out msg nelems", "dtype", "Group size", "bytes")
    } == {
        "Collective name": "allreduce",
        "In msg nelems": 8,
        "Out msg nelems": 8,
        "dtype": "float32",
        "Group size": 1,
        "bytes": 32,
    }
    assert ar["args"]["Input Dims"] == [[8], [8]]  # record_shapes: the two buffers


@needs_mpi4py
def test_a_failure_while_wrapping_leaves_mpi4py_untouched():
    out = _run(
        STANDIN
        + """
import warnings
before = {(c.__name__, n): c.__dict__[n] for c in (MPI.Comm, MPI.Intracomm, MPI.Request)
          for n in m.METHODS if n in c.__dict__}
def broken(*a, **k):
    raise RuntimeError("boom")
m._make_request_classmethod = broken          # fails after the Comm methods were wrapped
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    m.install()
same = all(c.__dict__[n] is before[(c.__name__, n)] for c in (MPI.Comm, MPI.Intracomm, MPI.Request)
           for n in m.METHODS if n in c.__dict__)
MPI.COMM_WORLD.Barrier()
print(json.dumps({"same": same, "installed": m.is_installed(), "rec": REC,
                  "warnings": [str(x.message) for x in w]}))
"""
    )
    res = json.loads(out.strip().splitlines()[-1])
    assert res["same"] and not res["installed"] and res["rec"] == []
    assert any("could not wrap mpi4py (RuntimeError: boom)" in w for w in res["warnings"])
