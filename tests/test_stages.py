"""The analysis stages the views share: communication recognition, ProfilerStep ranges, GPU->launch->op links,
the op tree, the per-trace cache, Tensor Core kernel names."""

from __future__ import annotations

import numpy as np
import pytest

from profiler_core.analysis.stages import op_tree as op_tree_module
from profiler_core.analysis.stages.classify import communication_mask, is_communication, is_dataloader
from profiler_core.analysis.stages.gpu_links import link_gpu_to_ops, link_launches_to_ops
from profiler_core.analysis.stages.op_tree import innermost_op_at, op_tree
from profiler_core.analysis.stages.registry import cached
from profiler_core.analysis.stages.steps import early_gpu_rows, steps
from profiler_core.analysis.tensor_cores import uses_tensor_cores

from .test_views_common_support import kernel, make_trace, op, runtime


@pytest.mark.parametrize(
    "name,cat,expected",
    [
        ("nccl:all_reduce", "cpu_op", True),
        ("gloo:all_reduce", "user_annotation", True),
        ("c10d::allreduce_", "cpu_op", True),
        ("record_param_comms", "cpu_op", True),
        ("mpi::Allreduce", "cpu_op", True),
        ("mpi::Isend", "cpu_op", True),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "kernel", True),
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "kernel", True),
        ("volta_sgemm_128x64_nn", "kernel", False),
        ("aten::mm", "cpu_op", False),
        ("nccl:all_reduce", "cuda_runtime", False),
        ("cudaLaunchKernel", "cuda_runtime", False),
        ("Memcpy DtoD (Device -> Device)", "gpu_memcpy", False),
        ("gloo_helper", "cpu_op", False),
        ("torch/distributed/distributed_c10d.py(1394): is_initialized", "python_function", False),
    ],
)
def test_is_communication(name, cat, expected):
    assert is_communication(name, cat) is expected


def test_communication_mask_agrees_with_is_communication():
    events = [
        op("nccl:all_reduce", 0, 5),
        op("aten::add", 6, 1),
        op("gloo:broadcast", 8, 1, cat="user_annotation"),
        op("record_param_comms", 10, 1),
        runtime("cudaLaunchKernel", 11, 1, corr=1),
        kernel("ncclKernel_AllReduce", 12, 3, corr=1),
        kernel("sgemm", 16, 3, corr=2),
        op("mpi::Wait", 20, 2),
    ]
    t = make_trace(events)
    mask = communication_mask(t.events)
    expected = [is_communication(n, c) for n, c in zip(t.events["name"], t.events["cat"])]
    assert mask.tolist() == expected
    assert sum(expected) == 5


def test_dataloader_names():
    assert is_dataloader("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__")
    assert is_dataloader("enumerate(DataPipe)#ShufflerIterDataPipe")
    assert not is_dataloader("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__init__")


# -------------------------------------------------------------------------------------------------- steps
def _gpu_steps_trace(last_step_kernels: int = 5):
    """Three steps; each launches kernels that run past the step's CPU end."""
    ev = []
    corr = 0
    for i, (s, e) in enumerate([(100, 200), (210, 300), (310, 400)]):
        ev.append(op(f"ProfilerStep#{i + 3}", s, e - s, ext=1000 + i))
        n = 5 if i < 2 else last_step_kernels
        for j in range(n):
            corr += 1
            ev.append(runtime("cudaLaunchKernel", s + 10 + j, 1, corr=corr, ext=1000 + i))
            ev.append(kernel("k", s + 50 + 10 * j, 10, corr=corr))  # last one ends at s + 100 + 10
    return ev


def test_steps_extend_to_gpu_work_launched_inside():
    t = make_trace(_gpu_steps_trace())
    st = steps(t)
    assert st["step"].tolist() == ["3", "4", "5"]
    base = t.base_ns
    us = lambda col: ((st[col] + base) / 1000).tolist()  # noqa: E731
    # step 3: CPU [100, 200], its last kernel ends at 200; step 4: CPU [210, 300] but its GPU work ends at 310
    assert us("start") == [100, 210, 310]
    assert us("end") == [200, 310, 410]
    assert us("host_end") == [200, 300, 400]
    assert st["device_ops"].tolist() == [5, 5, 5]


def test_steps_next_step_starts_after_previous_gpu_end():
    ev = _gpu_steps_trace()
    ev.append(runtime("cudaLaunchKernel", 290, 1, corr=99, ext=1001))
    ev.append(kernel("long", 295, 40, corr=99))  # step 4's work now ends at 335, past step 5's CPU start
    t = make_trace(ev)
    st = steps(t)
    starts = ((st["start"] + t.base_ns) / 1000).tolist()
    ends = ((st["end"] + t.base_ns) / 1000).tolist()
    assert ends[1] == 335 and starts[2] == 335


def test_steps_drop_tail_with_too_little_gpu_work():
    t = make_trace(_gpu_steps_trace(last_step_kernels=3))  # 3 < 0.8 * 5: not fully captured
    assert steps(t)["step"].tolist() == ["3", "4"]
    t = make_trace(_gpu_steps_trace(last_step_kernels=4))  # 4 >= 0.8 * 5: kept
    assert steps(t)["step"].tolist() == ["3", "4", "5"]
    t = make_trace(_gpu_steps_trace(last_step_kernels=0))  # no GPU work at the end: dropped
    assert steps(t)["step"].tolist() == ["3", "4"]


def test_steps_first_step_keeps_its_cpu_start_despite_earlier_gpu_work():
    ev = _gpu_steps_trace()
    ev.append(runtime("cudaLaunchKernel", 50, 1, corr=500))  # launched before profiling step 3
    ev.append(kernel("warmup", 90, 30, corr=500))  # ends at 120, before step 3's first kernel (150)
    t = make_trace(ev)
    st = steps(t)
    # torch-tb-profiler 0.4.3 starts step 3 at 120; the work launched before the window never moves a step
    assert (st["start"].iloc[0] + t.base_ns) / 1000 == 100
    warmup = early_gpu_rows(t)
    assert t.events["name"].astype(str).to_numpy()[warmup].tolist() == ["warmup"]


def test_steps_without_profiler_steps_cover_the_whole_trace_window():
    t = make_trace(
        [
            op("aten::add", 10, 5),
            op("aten::mul", 30, 20, tid=2),
            kernel("k", 100, 50, corr=1),
            op("PyTorch Profiler (0)", 0, 500, cat="Trace"),
        ]
    )
    st = steps(t)
    assert st["step"].tolist() == ["0"]
    # issue 23 item 8: the first op (10 µs) to the kernel's end (150 µs), as torch-tb-profiler and HTA's
    # temporal breakdown; never the profiler's own Trace span (0..500 µs)
    assert (st["start"].iloc[0] + t.base_ns) / 1000 == 10 and (st["end"].iloc[0] + t.base_ns) / 1000 == 150


def test_steps_cpu_only_keep_host_ranges_and_user_annotation_steps():
    t = make_trace(
        [
            op("ProfilerStep#1", 0, 10, cat="user_annotation"),
            op("aten::add", 2, 3),
            op("ProfilerStep#2", 12, 10, cat="user_annotation"),
        ]
    )
    st = steps(t)
    assert st["step"].tolist() == ["1", "2"]
    assert (st["end"] - st["start"]).tolist() == [10_000, 10_000]
    assert steps(make_trace([]))["step"].tolist() == []


# -------------------------------------------------------------------------------------------------- links
def test_link_by_correlation_and_external_id():
    t = make_trace(
        [
            op("aten::mm", 0, 100, ext=7),
            op("aten::relu", 100, 50, ext=8),
            runtime("cudaLaunchKernel", 10, 5, corr=1, ext=7),
            runtime("cudaLaunchKernel", 110, 5, corr=2, ext=8),
            kernel("gemm", 20, 30, corr=1),
            kernel("relu_kernel", 120, 5, corr=2),
            kernel("orphan", 200, 5, corr=3),
        ]
    )
    ev = t.events
    links = link_gpu_to_ops(t).set_index("row")
    name = lambda r: str(ev["name"].iloc[r]) if r >= 0 else None  # noqa: E731
    got = {name(r): (name(x.runtime), name(x.op), x.external_id) for r, x in links.iterrows()}
    assert got == {
        "gemm": ("cudaLaunchKernel", "aten::mm", 7),
        "relu_kernel": ("cudaLaunchKernel", "aten::relu", 8),
        "orphan": (None, None, -1),
    }


def test_link_driver_calls_and_calls_without_external_id():
    """PyCUDA: cuLaunchKernel (cuda_driver) without External id -> the innermost op around the call."""
    t = make_trace(
        [
            op("outer", 0, 100, ext=1),
            op("my_kernel_op", 10, 50, ext=2, cat="user_annotation"),
            runtime("cuLaunchKernel", 20, 5, corr=11, cat="cuda_driver"),
            runtime("cuMemcpyHtoD_v2", 70, 5, corr=12, cat="cuda_driver"),
            kernel("axpy", 30, 10, corr=11),
            kernel("Memcpy HtoD", 80, 10, corr=12, cat="gpu_memcpy"),
        ]
    )
    ev = t.events
    links = link_gpu_to_ops(t)
    ops = [str(ev["name"].iloc[r]) for r in links["op"]]
    assert ops == ["my_kernel_op", "outer"]
    assert all(str(ev["cat"].iloc[r]) == "cuda_driver" for r in links["runtime"])
    launches = link_launches_to_ops(t)
    assert [str(ev["name"].iloc[r]) for r in launches["op"]] == ["my_kernel_op", "outer"]


def test_link_old_traces_by_the_activity_external_id():
    """An activity whose launch is missing still finds its op through its own External id."""
    t = make_trace([op("aten::copy_", 0, 50, ext=5), kernel("copy_kernel", 10, 5, corr=77, **{"external id": 5})])
    links = link_gpu_to_ops(t)
    assert links["runtime"].tolist() == [-1]
    assert str(t.events["name"].iloc[links["op"].iloc[0]]) == "aten::copy_"


# ------------------------------------------------------------------------------------------------ op tree
def test_op_tree_nesting_zero_length_and_threads():
    t = make_trace(
        [
            op("a", 0, 100),
            op("b", 10, 20),
            op("c", 15, 0),
            op("d", 30, 0),
            op("e", 30, 10),
            op("x", 5, 10, tid=2),
            op("f", 100, 5),
        ]
    )
    ev = t.events
    tree = op_tree(t)
    name = lambda r: str(ev["name"].iloc[r]) if r >= 0 else None  # noqa: E731
    parents = {name(r): name(p) for r, p in zip(tree["row"], tree["parent"])}
    # zero-length ops are leaves of the op open at their time; an op starting where its parent ends is a sibling
    assert parents == {"a": None, "b": "a", "c": "b", "e": "a", "d": "e", "x": None, "f": None}


def test_op_tree_partial_overlap_goes_under_the_container():
    t = make_trace([op("outer", 0, 100), op("p", 10, 30), op("q", 30, 20), op("r", 35, 5)])
    ev = t.events
    tree = op_tree(t)
    name = lambda r: str(ev["name"].iloc[r]) if r >= 0 else None  # noqa: E731
    parents = {name(r): name(p) for r, p in zip(tree["row"], tree["parent"])}
    assert parents == {"outer": None, "p": "outer", "q": "outer", "r": "q"}


def test_op_tree_merges_same_name_single_child():
    t = make_trace([op("aten::div", 0, 10, ext=1), op("aten::div", 1, 8, ext=2), op("aten::empty", 2, 1, ext=3)])
    ev = t.events
    tree = op_tree(t).set_index("row")
    inner = int(np.flatnonzero((ev["name"] == "aten::div").to_numpy())[1])
    outer = int(np.flatnonzero((ev["name"] == "aten::div").to_numpy())[0])
    empty = int(np.flatnonzero((ev["name"] == "aten::empty").to_numpy())[0])
    assert tree.loc[inner, "merged_into"] == outer
    assert tree.loc[empty, "parent"] == outer


def test_innermost_op_at_queries():
    t = make_trace(
        [
            op("a", 0, 100),
            op("b", 10, 20),
            op("m", 40, 20, cat="python_function", **{"Python module id": 3, "Python id": 1}),
        ]
    )
    ev = t.events
    rows = innermost_op_at(t, [1, 1, 1, 1, 2], [1, 1, 1, 1, 1], np.array([15, 45, 150, 30, 15]) * 1000 - t.base_ns)
    names = [str(ev["name"].iloc[r]) if r >= 0 else None for r in rows]
    assert names == ["b", "a", None, "a", None]  # modules are skipped; ends are exclusive


# ------------------------------------------------------------------------------------------ Tensor Cores
@pytest.mark.parametrize(
    "name",
    [
        "volta_h884gemm_128x128_ldg8_nn",
        "turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_nn",
        "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn",
        "ampere_bf16_s16816gemm_bf16_64x64_sliced1x2",
        "sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off",
        "cutlass3x_sm90_tensorop_s64x128x16gemm_bf16_bf16_f32_bf16_bf16_128x128x64_1x1x1_0_tnn_align8",
        "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>(Params)",
        "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT",
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits>",
        "void xmma_cudnn::gemm::kernel<implicit_gemm_hmma>(Params)",
        "sm75_xmma_fprop_implicit_gemm_indexed_f16f16",
        "turing_int8_imma_gemm",
        "wgmma_gemm_kernel",
        "void wmma_example<half>(half*)",
    ],
)
def test_tensor_core_kernel_names(name):
    assert uses_tensor_cores(name)


@pytest.mark.parametrize(
    "name",
    [
        "volta_sgemm_128x64_nn",
        "ampere_sgemm_128x64_nn",
        "void implicit_convolve_sgemm<float, float, 1024>",
        "void cutlass::Kernel<cutlass_80_simt_sgemm_128x128_8x4_nn_align1>(Params)",
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
        "void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>",
        "Memcpy HtoD (Pageable -> Device)",
    ],
)
def test_non_tensor_core_kernel_names(name):
    assert not uses_tensor_cores(name)


def test_derived_memoises_per_trace():
    t = make_trace([op("a", 0, 1)])
    calls = []
    assert cached(t, "k", lambda: calls.append(1) or 42) == 42
    assert cached(t, "k", lambda: calls.append(1) or 43) == 42
    assert calls == [1]
    t2 = make_trace([op("a", 0, 1)])
    assert cached(t2, "k", lambda: 7) == 7


def _reference_parents(nodes):
    """torch-tb-profiler's stack algorithm per thread on (name, tid, start, end) tuples; parent name or None."""
    out = {}
    for tid in {n[1] for n in nodes}:
        stack = []
        for name, _, s, e in sorted((n for n in nodes if n[1] == tid), key=lambda n: (n[2], -n[3], n[0])):
            while stack and not (s < stack[-1][3] and e <= stack[-1][3]):
                stack.pop()
            out[name] = stack[-1][0] if stack else None
            stack.append((name, tid, s, e))
    return out


@pytest.mark.parametrize("tids", [(1, 2, 3), (1,)])
@pytest.mark.parametrize("by_level", [True, False])
@pytest.mark.parametrize("seed", range(8))
def test_op_tree_matches_a_stack_walk_on_random_nesting(seed, by_level, tids, monkeypatch):
    # both ways of finding the candidate parents: level by level (shallow trees) and one search (deep ones)
    monkeypatch.setattr(op_tree_module, "LEVEL_PASSES_MAX", 10 if by_level else -1)
    rng = np.random.default_rng(seed)
    nodes = []

    def grow(tid, s, e, depth):
        t = s
        while t < e and len(nodes) < 400:
            if rng.random() < 0.3:
                nodes.append((f"n{len(nodes)}", tid, t, t))  # zero-length leaf
            d = int(rng.integers(0, max(1, (e - t) // 2) + 1))
            if t + d > e:
                break
            nodes.append((f"n{len(nodes)}", tid, t, t + d))
            if depth < 6 and d > 2:
                grow(tid, t + int(rng.integers(0, 2)), t + d - int(rng.integers(0, 2)), depth + 1)
            t += d + int(rng.integers(0, 3))

    for tid in tids:
        grow(tid, 0, 1000, 0)
    t = make_trace([op(n, s, e - s, tid=tid) for n, tid, s, e in nodes])
    ev = t.events
    tree = op_tree(t)
    name = lambda r: str(ev["name"].iloc[r]) if r >= 0 else None  # noqa: E731
    got = {name(r): name(p) for r, p in zip(tree["row"], tree["parent"])}
    assert got == _reference_parents(nodes)
    assert (tree["merged_into"] < 0).all()  # unique names: nothing to merge


def test_collective_calls_are_record_param_comms_and_collective_mpi_methods():
    """A collective call is what every member of a group calls (matched across ranks): record_param_comms naming its
    collective and the collective MPI methods; MPI point-to-point calls and request completions are not."""
    from profiler_core.analysis.stages.classify import collective_call_mask, is_collective_call

    cases = [
        ("record_param_comms", "allreduce", True),
        ("record_param_comms", "", False),
        ("mpi::Allreduce", "allreduce", True),
        ("mpi::allreduce", "allreduce", True),  # the pickle-based form
        ("mpi::Iallreduce", "iallreduce", True),
        ("mpi::Barrier", "barrier", True),
        ("mpi::Bcast", "bcast", True),
        ("mpi::Isend", "isend", False),
        ("mpi::Recv", "recv", False),
        ("mpi::Wait", "wait", False),
        ("mpi::Waitall", "waitall", False),
        ("nccl:all_reduce", "", False),
        ("aten::add", "", False),
    ]
    for name, coll, expected in cases:
        assert is_collective_call(name, coll) is expected, (name, coll)
    events = [op(n, 10 * i, 5, **({"Collective name": c} if c else {})) for i, (n, c, _) in enumerate(cases)]
    t = make_trace(events)
    keys = [f"{n}/{c}" for n, c in zip(t.events["name"].astype(str), t.arg("coll_name"))]
    got = dict(zip(keys, collective_call_mask(t).tolist()))
    assert got == {f"{n}/{c}": e for n, c, e in cases}


def test_mpi_collectives_are_collective_calls_with_their_communicator_as_group():
    from profiler_core.analysis.comm import collectives

    events = [
        op(
            "mpi::Allreduce",
            0,
            50,
            **{
                "Collective name": "allreduce",
                "Group size": 4,
                "In msg nelems": 10,
                "dtype": "float32",
                "Process Group Name": "MPI_COMM_WORLD",
            },
        ),
        op("mpi::Isend", 60, 5, **{"Collective name": "isend", "peer": 1, "bytes": 8}),
        op("mpi::Wait", 70, 5, **{"Collective name": "wait", "Requests": 1}),
        op("mpi::Bcast", 80, 5, **{"Collective name": "bcast", "Group size": 2, "Process Group Name": "rows"}),
    ]
    c = collectives.collectives(make_trace(events))
    assert c["name"].tolist() == ["mpi::Allreduce", "mpi::Bcast"]  # as the trace names them
    assert c["pg"].tolist() == ["MPI_COMM_WORLD", "rows"]
    assert c["group_size"].tolist() == [4, 2]
    assert c["dur"].tolist() == [50_000, 5_000]  # ns: the CPU call (no NCCL kernel)
    assert c["bytes"].tolist()[0] == 40 and not c["is_wait"].any()


@pytest.mark.parametrize("seed", range(6))
def test_children_cover_sum_of_apart_siblings_equals_the_union(seed):
    # node_stats' shortcut (siblings one after another: the sum of their lengths) gives the union's length,
    # and falls back to the union where siblings overlap or come interleaved
    from profiler_core.analysis.stages import node_stats as ns

    rng = np.random.default_rng(seed)
    n = 60
    depth = rng.integers(0, 4, n)
    start = np.sort(rng.integers(0, 1000, n)).astype(np.int64)
    end = start + rng.integers(0, 500, n)
    taken = []
    for apart in (True, False):
        parent = np.sort(rng.integers(0, n, 200)) if apart else rng.integers(0, n, 200)
        cs = np.empty(200, np.int64)
        for p in np.unique(parent):  # apart: each node's children in order, gaps (or touching) between them
            k = np.flatnonzero(parent == p)
            cuts = np.sort(rng.integers(start[p] - 5, end[p] + 5, len(k)))
            cs[k] = cuts
        ce = cs + (rng.integers(0, 3, 200) if apart else rng.integers(0, 400, 200))
        if apart:
            ce = np.minimum(ce, np.append(cs[1:], ce[-1]))
        clipped_s = np.maximum(cs, start[parent])  # (as _children_cover clips them)
        clipped_e = np.maximum(np.minimum(ce, end[parent]), clipped_s)
        taken.append(ns._siblings_apart(parent, clipped_s, clipped_e, depth[parent]))
        fast = ns._children_cover(n, start, end, parent, cs.copy(), ce.copy(), depth=depth)
        slow = ns._children_cover(n, start, end, parent, cs.copy(), ce.copy())
        assert np.array_equal(fast, slow)
    assert taken == [True, False]


@pytest.mark.parametrize("block", [1 << 20, 7])
@pytest.mark.parametrize("seed", range(6))
def test_tree_cover_by_parent_depth_equals_the_union(seed, block, monkeypatch):
    # node_stats' tree-only cover (children taken a parent depth at a time, from the tree's arrays) gives the
    # union's length, or None where siblings overlap; shallow trees (passes per depth) and deep ones (one sort),
    # in blocks of tree positions
    from profiler_core.analysis.stages import node_stats as ns

    monkeypatch.setattr(ns, "COVER_BLOCK", block)  # (small blocks: runs of children across blocks)
    rng = np.random.default_rng(seed)
    for deep, nested in ((False, True), (True, True), (False, False), (True, False)):
        n = 300
        parent = np.full(n, -1)
        depth = np.zeros(n, np.int64)
        stack: list[int] = []
        for i in range(n):  # a random tree in preorder (deep: mostly one chain)
            while stack and (rng.random() < 0.05 or (not deep and (len(stack) > 8 or rng.random() < 0.4))):
                stack.pop()
            if stack:
                parent[i] = stack[-1]
                depth[i] = depth[stack[-1]] + 1
            stack.append(i)
        last = np.arange(n)  # each node's last descendant
        for i in range(n - 1, -1, -1):
            if parent[i] >= 0:
                last[parent[i]] = max(last[parent[i]], last[i])
        start = np.arange(n, dtype=np.int64) * 10
        end = last * 10 + 5 if nested else start + rng.integers(0, 400, n)
        keep = np.sort(rng.choice(n + 50, n, replace=False))  # the nodes' positions in a bigger tree
        tstart, tend = np.zeros(n + 50, np.int64), np.zeros(n + 50, np.int64)
        tstart[keep], tend[keep] = start, end
        got = ns._tree_cover(n, tstart, tend, keep, parent, depth)
        hp = parent >= 0
        want = ns._children_cover(n, start, end, parent[hp], start[hp].copy(), end[hp].copy())
        assert (depth.max() > ns.LEVEL_PASSES_MAX) == deep
        if nested:
            assert got is not None and np.array_equal(got, want)
        else:
            assert got is None


def test_threads_asking_one_stage_at_once_compute_it_once():
    """The stage cache is single-flight: threads asking for one key of one trace at once wait for the one
    computing it (the loader's two warming threads and a request share stages); other keys do not wait."""
    import threading

    from profiler_core.analysis.stages.registry import _computing, cached

    class T:  # any weak-referenceable object stands for a trace
        pass

    t = T()
    calls, started, release = [], threading.Event(), threading.Event()

    def slow() -> int:
        calls.append(threading.current_thread().name)
        started.set()
        release.wait(30)  # "k" stays in computation until the other key has been answered
        return 42

    results = []
    threads = [threading.Thread(target=lambda: results.append(cached(t, "k", slow))) for _ in range(4)]
    for th in threads:
        th.start()
    assert started.wait(10)
    # not behind "k": answered while "k" is still computing (no clock: a deadlock would leave `other` empty)
    other: list[int] = []
    th_other = threading.Thread(target=lambda: other.append(cached(t, "other", lambda: 7)))
    th_other.start()
    th_other.join(20)
    assert other == [7] and not release.is_set()
    release.set()
    for th in threads:
        th.join()
    assert results == [42] * 4 and len(calls) == 1
    assert not [k for k in _computing if k[0] == id(t)]  # nothing left behind

    def failing() -> int:
        calls.append("failed")
        raise RuntimeError("boom")

    for _ in range(2):  # a failure is not kept: the next caller computes again
        try:
            cached(t, "bad", failing)
        except RuntimeError:
            pass
    assert calls.count("failed") == 2 and not [k for k in _computing if k[0] == id(t)]
