"""Safe in a real process, on the GPU (each test independent, small shapes, memory freed):

* memory: 300 calls at 300 different N do not grow the device memory in use (nothing is kept per N);
* aliasing and alignment: outputs sharing memory with another tensor, and misaligned views, are
  refused with a ValueError naming them;
* v6 at the largest C its shared-memory check accepts runs and is right; 8 more is refused, naming
  it.

Threads and streams: tests/test_safety_concurrency.py; refusals before the GPU:
tests/test_safety.py.
"""
import gc

import numpy as np
import pytest
from _gpu_support import TENSORS, compare_both, free, reference_of, to_device

import rmsnorm_lessons as rl
from rmsnorm_lessons.core import build, gpu, ladder, launch, reference

SHIPPED = tuple(r.name for r in ladder.SHIPPED)
MiB = 1 << 20


def _args(p):
    return [p[k] for k in TENSORS]


# --------------------------------------------------------------------------------------------------
# on the GPU: memory


def _zeros(shape, dtype):
    from pycuda import gpuarray

    a = gpuarray.empty(shape, dtype)
    gpu.driver().memset_d8(a.gpudata, 0, a.nbytes)
    return a


def _free_bytes():
    # what this process's launchers hold, not the device's free memory: other test workers share the
    # GPU (lab/real_process.py measures the device-wide figure in a process of its own)
    rl.gpu.synchronize()
    gc.collect()
    return -launch.held_bytes()


def _memory_case(version):
    """The rung and the C the memory tests use: a C every rung accepts (bf16 rungs need a multiple
    of 8)."""
    spec = ladder.get(version)
    return spec, 1024 if spec.dtype == np.float32 else 4096


def _first_rows(tensors: dict, N: int) -> list:
    """run()'s arguments, in order, holding the first N rows of the row tensors (views, not
    copies)."""
    return [tensors[k][:N] if k in ("dout", "inp", "dinp", "rstd") else tensors[k] for k in TENSORS]


@pytest.mark.gpu
@pytest.mark.parametrize("version", SHIPPED)
def test_300_shapes_do_not_grow_device_memory(version):
    spec, C = _memory_case(version)
    Ns = [1000 + 37 * i for i in range(300)]
    top = max(Ns)
    big = {k: _zeros((top, C), spec.dtype) for k in ("dout", "inp", "dinp")}
    big["rstd"] = _zeros((top,), np.float32)
    big["weight"], big["dweight"] = _zeros((C,), spec.dtype), _zeros((C,), spec.dtype)
    try:
        def call(N):  # views of the first N rows of each tensor: GPUArrays of exactly (N, C)
            args = _first_rows(big, N)
            assert args[1].shape == (N, C) and args[1].flags.c_contiguous
            out = rl.run(version, *args)
            assert out[0] is args[4] and out[1] is args[5]

        call(top)  # the launcher and its scratch exist, at the largest N
        before = _free_bytes()
        for N in Ns:
            call(N)
        after = _free_bytes()
        print(f"{version}: device memory in use grew by {(before - after) / MiB:.1f} MiB over "
              f"{len(Ns)} shapes")
        assert before - after <= 64 * MiB
        # zeros in, zeros out: nothing went astray
        assert not np.any(np.asarray(big["dinp"].get(), np.float32))
    finally:
        free(big)


@pytest.mark.gpu
@pytest.mark.parametrize("version", SHIPPED)
def test_numpy_calls_at_many_shapes_free_their_device_buffers(version):
    spec, C = _memory_case(version)
    Ns = [100 + 13 * i for i in range(60)]
    p = reference.random_problem(max(Ns), C, spec.dtype, seed=9)
    rl.run(version, *[p[k] for k in TENSORS])
    before = _free_bytes()
    for N in Ns:
        args = _first_rows(p, N)
        rl.run(version, *args)
    after = _free_bytes()
    print(f"{version}: device memory in use grew by {(before - after) / MiB:.1f} MiB over "
          f"{len(Ns)} NumPy calls")
    assert before - after <= 64 * MiB
    # and the last call was right
    N = Ns[-1]
    args = _first_rows(p, N)
    a, b = compare_both(version, N, rl.run(version, *args), reference.backward(*args),
                   label="last of many shapes")
    assert a.ok and b.ok, f"{a}\n{b}"


# --------------------------------------------------------------------------------------------------
# on the GPU: aliasing and alignment


@pytest.mark.gpu
@pytest.mark.parametrize("version", [r.name for r in ladder.SHIPPED])
def test_real_aliased_outputs_refused(version):
    from pycuda import gpuarray

    spec = ladder.get(version)
    N, C = 8, 64
    p = reference.random_problem(N, C, spec.dtype, seed=71)
    dev = to_device(p)
    try:
        def call(**replace):
            g = {**dev, **replace}
            return rl.run(version, *[g[k] for k in TENSORS])

        with pytest.raises(ValueError, match=r"^dweight is the same memory as weight"):
            call(dweight=dev["weight"])
        with pytest.raises(ValueError, match=r"^dinp is the same memory as dout"):
            call(dinp=dev["dout"])
        # two views into one allocation, the second 256 bytes into the first
        block = gpuarray.empty(2 * N * C + 256, spec.dtype)
        first = gpuarray.GPUArray((N, C), spec.dtype, gpudata=int(block.gpudata))
        second = gpuarray.GPUArray((N, C), spec.dtype, gpudata=int(block.gpudata) + 256)
        with pytest.raises(ValueError, match=r"^dinp overlaps inp: an output may not share memory"):
            call(dinp=first, inp=second)
        with pytest.raises(ValueError, match=r"^dinp overlaps dout"):
            call(dinp=second, dout=first)
        # side by side, not overlapping: accepted, and right
        apart = gpuarray.GPUArray((N, C), spec.dtype,
                                  gpudata=int(block.gpudata) + N * C * spec.dtype.itemsize + 256)
        first.set(np.ascontiguousarray(p["inp"]))
        apart.set(np.ascontiguousarray(p["dinp"]))
        call(inp=first, dinp=apart)
        a, b = compare_both(version, N, (apart.get(), dev["dweight"].get()), reference_of(p),
                       label="views side by side")
        assert a.ok and b.ok, f"{a}\n{b}"
        block.gpudata.free()
    finally:
        free(dev)


@pytest.mark.gpu
@pytest.mark.parametrize("version,offset,align",
                         [(r.name, *((8, 16) if r.c_multiple > 1 else (2, r.dtype.itemsize)))
                          for r in ladder.SHIPPED])
def test_real_misaligned_view_refused(version, offset, align):
    from pycuda import gpuarray

    spec = ladder.get(version)
    N, C = 4, 64
    p = reference.random_problem(N, C, spec.dtype, seed=81)
    dev = to_device(p)
    block = gpuarray.empty(N * C + 64, spec.dtype)
    try:
        view = gpuarray.GPUArray((N, C), spec.dtype, gpudata=int(block.gpudata) + offset)
        g = {**dev, "inp": view}
        with pytest.raises(ValueError,
                           match=rf"^inp must start on a {align}-byte boundary for {version}"):
            rl.run(version, *[g[k] for k in TENSORS])
        # an aligned view of the same block is accepted and right
        ok = gpuarray.GPUArray((N, C), spec.dtype,
                               gpudata=int(block.gpudata) + (4 if align == 4 else 16))
        ok.set(np.ascontiguousarray(p["inp"]))
        g = {**dev, "inp": ok}
        rl.run(version, *[g[k] for k in TENSORS])
        a, b = compare_both(version, N, (dev["dinp"].get(), dev["dweight"].get()), reference_of(p),
                       label="aligned view")
        assert a.ok and b.ok, f"{a}\n{b}"
    finally:
        block.gpudata.free()
        free(dev)


# --------------------------------------------------------------------------------------------------
# on the GPU: v6 at the edge of the device's shared memory


@pytest.mark.gpu
def test_v6_at_the_largest_C_it_accepts():
    rung = ladder.get("v6_last_block")
    facts = gpu.facts()
    static = build.resources("v6_last_block", facts.arch)["rmsnorm_backward_v6"].shared_bytes
    largest = launch.largest_c(rung, facts.shared_memory_per_block_optin - static, rung.block_size)
    print(f"v6_last_block: {static} B static shared memory, largest C {largest} on {facts.name}")
    assert largest % 8 == 0 and largest > 4096  # past the 48 KiB a launch gets without opting in
    assert static + ladder.shared_memory(rung, largest) <= facts.shared_memory_per_block_optin
    assert static + ladder.shared_memory(rung, largest + 8) > facts.shared_memory_per_block_optin
    N = 5
    p = reference.random_problem(N, largest, rung.dtype, seed=91)
    a, b = compare_both(rung, N, rl.run(rung, *_args(p)), reference_of(p), label=f"C={largest}")
    assert a.ok and b.ok, f"{a}\n{b}"
    q = reference.random_problem(N, largest + 8, rung.dtype, seed=92)
    with pytest.raises(ValueError,
                       match=rf"^C={largest + 8} needs \d+ bytes of dynamic shared memory per "
                             rf"block for v6_last_block \(\+ {static} static\), more than this "
                             rf"device allows \({facts.shared_memory_per_block_optin} bytes\); "
                             rf"the largest C it can run is {largest}$"):
        rl.run(rung, *_args(q))
