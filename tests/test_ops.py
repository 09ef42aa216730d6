"""The op API: record_op / operator, input shapes and types as torch writes them."""

import numpy as np
import pytest

from profiler_core import ProfilerActivity, operator, profile, record_op
from profiler_core.ops import describe_input

CPU = [ProfilerActivity.CPU]


def _ops(trace):
    return [e for e in trace["traceEvents"] if e.get("cat") == "cpu_op"]


@pytest.mark.parametrize(
    "dtype,name",
    [
        (np.float32, "float"),
        (np.float64, "double"),
        (np.int64, "long int"),
        (np.int32, "int"),
        (np.float16, "c10::Half"),
        (np.bool_, "bool"),
    ],
)
def test_dtype_names(dtype, name):
    assert describe_input(np.zeros((2, 3), dtype=dtype))[1] == name


def test_scalars_lists_none_and_odd_objects():
    assert describe_input(2) == ([], "Scalar", [], "2")
    assert describe_input(0.5) == ([], "Scalar", [], "0.5")
    assert describe_input(False) == ([], "Scalar", [], "False")
    assert describe_input([1, 1]) == ([], "ScalarList", [], "[1, 1]")
    assert describe_input(None) == ([], "", [], "")
    a, b = np.zeros((2, 3)), np.zeros(4)
    assert describe_input([a, b])[:2] == ([[2, 3], [4]], "TensorList")

    class Broken:
        @property
        def shape(self):
            raise RuntimeError("no")

        dtype = "float32"

    assert describe_input(Broken()) == ([], "", [], "")


def test_duck_typed_array_like():
    class GPUArrayLike:  # what pycuda's GPUArray / cupy expose
        shape = (8, 16)
        dtype = np.dtype("float32")
        strides = (64, 4)

    assert describe_input(GPUArrayLike()) == ([8, 16], "float", [16, 1], "")


def test_record_op_with_shapes():
    a = np.ones((4, 5), dtype=np.float32)
    b = np.ones((5, 6), dtype=np.float32)
    with profile(activities=CPU, record_shapes=True) as p:
        with record_op("mylib::mm", a, b, alpha=1.0):
            a @ b
    (e,) = _ops(p.trace)
    assert e["name"] == "mylib::mm" and e["cat"] == "cpu_op"
    args = e["args"]
    assert args["Input Dims"] == [[4, 5], [5, 6], []]
    assert args["Input type"] == ["float", "float", "Scalar"]
    assert args["Concrete Inputs"] == ["", "", "1.0"]
    assert args["Input Strides"] == [[5, 1], [6, 1], []]
    assert "flops" not in args


def test_record_op_without_record_shapes_has_no_shape_args():
    with profile(activities=CPU) as p:
        with record_op("op", np.zeros(3)):
            pass
    (e,) = _ops(p.trace)
    assert "Input Dims" not in e["args"]


def test_extra_args_are_added():
    with profile(activities=CPU) as p:
        with record_op(
            "mpi::Allreduce", args={"Collective name": "allreduce", "In msg nelems": 10, "bytes": np.int64(40)}
        ):
            pass
    (e,) = _ops(p.trace)
    assert e["args"]["Collective name"] == "allreduce" and e["args"]["In msg nelems"] == 10


def test_operator_decorator_default_and_explicit_names():
    @operator
    def relu(x):
        return np.maximum(x, 0)

    @operator("mylib::add")
    def add(x, y):
        return x + y

    x = np.ones((3, 2))
    with profile(activities=CPU, record_shapes=True) as p:
        relu(x)
        add(x, y=x)
    names = {e["name"]: e for e in _ops(p.trace)}
    assert "test_operator_decorator_default_and_explicit_names.<locals>.relu" in names
    assert names["mylib::add"]["args"]["Input Dims"] == [[3, 2], [3, 2]]


def test_record_op_is_a_shared_noop_when_not_profiling():
    assert record_op("a") is record_op("b")
    with record_op("a", np.zeros(2)):
        pass


def test_op_nesting_inside_annotation_and_exceptions_close_ops():
    from profiler_core import record_function

    with profile(activities=CPU) as p:
        with record_function("step"):
            with pytest.raises(KeyError):
                with record_op("failing"):
                    raise KeyError("x")
    (op,) = _ops(p.trace)
    step = [e for e in p.trace["traceEvents"] if e.get("name") == "step"][0]
    assert step["ts"] <= op["ts"] <= step["ts"] + step["dur"]


def test_bad_args_type_is_a_clear_error():
    with profile(activities=CPU):
        with pytest.raises(TypeError, match="args must be a dict"):
            record_op("x", args=[1, 2])
