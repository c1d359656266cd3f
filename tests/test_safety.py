"""Safe in a real process: refused input never reaches the GPU; memory, threads, streams, aliasing.

CPU: every input ``run`` refuses, with its message, checked with ``gpu.require`` (and the launcher and
the compiler) replaced by a function that fails the test: a refusal that touched the GPU first would say
"GPU touched" instead.

GPU (each test independent, small shapes, memory freed):

* memory: 300 calls at 300 different N do not grow the device memory in use (nothing is kept per N);
* threads (each in a child process: PyCUDA aborts a process whose thread ends with a context pushed):
  four threads calling ``run`` at once, each on its own data, all right (and bitwise repeatable for the
  deterministic versions); a thread that never used the GPU before can call ``run``, and end;
* streams: on a PyCUDA stream ``run`` queues and returns (the stream is still busy), and the result is
  right once the stream is synchronised; on a PyTorch stream (or its int handle) ``run`` is ordered
  after the work already queued there and before the work queued after it;
* aliasing and alignment: outputs sharing memory with another tensor, and misaligned views, are refused
  with a ValueError naming them;
* v6 at the largest C its shared-memory check accepts runs and is right; 8 more is refused, naming it.
"""
import gc

import numpy as np
import pytest

import rmsnorm_lessons as rl
from rmsnorm_lessons import bf16, build, gpu, kernels, ladder, launch, reference
from rmsnorm_lessons.ladder.v7_fast import Config

from _gpu_support import (TENSORS, FakeGPUArray, bits, busy, clock_hz, compare, fakes, free, reference_of,
                          run_in_child, to_device)

SHIPPED = tuple(r.name for r in ladder.SHIPPED)
MiB = 1 << 20


def _args(p):
    return [p[k] for k in TENSORS]


def _problem(version, N=6, C=None, seed=0):
    spec = ladder.get(version)
    return reference.random_problem(N, C or 8 * spec.c_multiple, spec.dtype, seed=seed)


@pytest.fixture
def no_gpu(monkeypatch):
    """Anything that would reach the GPU (or compile for it) fails the test."""

    def touched(*args, **kwargs):
        raise AssertionError("GPU touched")

    monkeypatch.setattr(gpu, "require", touched)
    monkeypatch.setattr(gpu, "facts", touched)
    monkeypatch.setattr(launch, "launcher", touched)
    monkeypatch.setattr(build, "source_module", touched)


def test_the_guard_works(no_gpu):
    p = _problem("v2_warp")
    with pytest.raises(AssertionError, match="GPU touched"):
        kernels.run("v2_warp", *_args(p))


# ------------------------------------------------------------------------------------------------------
# refused before the GPU (CPU)


@pytest.mark.parametrize("block", [0, 33, 2048, -32, 1000, 1056])
def test_block_size_out_of_range(no_gpu, block):
    p = _problem("v1_naive")
    with pytest.raises(ValueError, match=rf"^block_size for v1_naive must be a multiple of 32 from 32 to 1024, "
                                         rf"got {block}$"):
        kernels.run("v1_naive", *_args(p), block_size=block)


@pytest.mark.parametrize("block,kind", [(256.5, "float"), ("256", "str"), (True, "bool"), (np.float64(256), "float64"),
                                        ([256], "list")])
def test_block_size_of_the_wrong_type(no_gpu, block, kind):
    p = _problem("v1_naive")
    with pytest.raises(TypeError, match=rf"^block_size must be an int \(threads per block\) or None, got {kind} "):
        kernels.run("v1_naive", *_args(p), block_size=block)


@pytest.mark.parametrize("version", ["v5_two_pass", "v6_last_block", "v7_fast"])
def test_block_size_past_the_launch_bounds(no_gpu, version):
    p = _problem(version)
    with pytest.raises(ValueError, match=rf"^block_size for {version} must be a multiple of 32 from 32 to 512 "
                                         rf"\(its __launch_bounds__\), got 1024$"):
        kernels.run(version, *_args(p), block_size=1024)


def test_numpy_ints_are_block_sizes():
    from rmsnorm_lessons import validate

    assert validate.block_size(ladder.get("v2_warp"), np.int64(128)) == 128
    assert validate.block_size(ladder.get("v2_warp"), None) == 256


def test_v7_block_too_small_for_the_row(no_gpu):
    p = _problem("v7_fast", N=2, C=4096)
    with pytest.raises(ValueError, match=r"v7_fast keeps a row in one block's registers: at C=4096 .*more than "
                                         r"block_size=96; the largest C at this block size is \d+"):
        kernels.run("v7_fast", *_args(p), block_size=96)


def test_a_width_no_gpu_can_hold_is_refused_before_the_gpu(no_gpu):
    # v6 stages 2 * C floats per block: at C = 1,000,000 that is 8 MB, more than any GPU gives a block
    p = _problem("v6_last_block", N=1, C=1_000_000)
    with pytest.raises(ValueError, match=r"^v6_last_block at C=1000000 needs \d+ bytes of dynamic shared memory "
                                         r"per block \(block of 512\); no GPU allows a block more than 232448 bytes$"):
        kernels.run("v6_last_block", *_args(p))


@pytest.mark.parametrize("value,kind", [("no", "str"), (1, "int"), (None, "NoneType"), (0.0, "float")])
def test_overwrite_must_be_a_bool(no_gpu, value, kind):
    p = _problem("v7_fast")
    with pytest.raises(TypeError, match=rf"^overwrite must be True or False, got {kind} "):
        kernels.run("v7_fast", *_args(p), overwrite=value)


def test_overwrite_where_not_offered(no_gpu):
    p = _problem("v6_last_block")
    with pytest.raises(ValueError, match=r"^overwrite=True \(dinp = instead of \+=\) is not offered by v6_last_block$"):
        kernels.run("v6_last_block", *_args(p), overwrite=True)


@pytest.mark.parametrize("version", [["v1_naive"], ("v1_naive",), 1, None, np.float32])
def test_version_of_the_wrong_type(no_gpu, version):
    p = _problem("v1_naive")
    with pytest.raises(TypeError, match=r"^version must be a version name \(str\) or a Rung, got "):
        kernels.run(version, *_args(p))


def test_unknown_version(no_gpu):
    p = _problem("v1_naive")
    with pytest.raises(ValueError, match=r"^version must be one of v1_naive, .*v7_fast; got 'v1'$"):
        kernels.run("v1", *_args(p))


@pytest.mark.parametrize("name", ["dout", "inp", "weight", "dinp", "dweight"])
def test_big_endian_float32_refused(no_gpu, name):
    p = _problem("v1_naive")
    p[name] = p[name].astype(">f4")
    with pytest.raises(TypeError, match=rf"^{name} must be native float32 for v1_naive, got big-endian float32$"):
        kernels.run("v1_naive", *_args(p))


@pytest.mark.parametrize("version", ["v1_naive", "v6_last_block"])
def test_big_endian_rstd_refused(no_gpu, version):
    p = _problem(version)
    p["rstd"] = p["rstd"].astype(">f4")
    with pytest.raises(TypeError, match=r"^rstd must be native float32 \(the forward pass caches it in fp32\), "
                                        r"got big-endian float32$"):
        kernels.run(version, *_args(p))


@pytest.mark.parametrize("version", ["v2_warp", "v6_last_block"])
def test_C_past_2_30_refused(no_gpu, version):
    C = 2**30 + 8
    f = fakes(version, 1, C)
    with pytest.raises(ValueError, match=r"^C \(the last dim of inp\) must be at most 2\*\*30 \(kernels index "
                                         rf"columns with int\), got {C}$"):
        kernels.run(version, *[f[k] for k in TENSORS])
    assert kernels.check_inputs(version, *[fakes(version, 1, 2**30)[k] for k in TENSORS]).C == 2**30


@pytest.mark.parametrize("version", ["v1_naive", "v5_two_pass", "v6_last_block"])
def test_config_is_only_for_v7(no_gpu, version):
    p = _problem(version)
    with pytest.raises(ValueError, match=rf"^config is for v7_fast's variants; {version} takes none$"):
        kernels.run(version, *_args(p), config=Config())


@pytest.mark.parametrize("config,rule", [
    (Config(K=4, prefetch=True), r"prefetch needs K = 2 .*got K=4"),
    (Config(K=1), r"at C=16384 a row needs 2048 threads of 1 chunks, more than block_size=512"),
])
def test_a_v7_config_that_cannot_run_this_C(no_gpu, config, rule):
    p = _problem("v7_fast", N=2, C=16384)
    with pytest.raises(ValueError, match=rule):
        kernels.run("v7_fast", *_args(p), config=config)


@pytest.mark.parametrize("kwargs,rule", [
    (dict(K=5), r"Config.K \(chunks per thread\) must be an int 1..4 or None, got 5"),
    (dict(K=True), r"Config.K"), (dict(K=2.0), r"Config.K"),
    (dict(prefetch=1), r"Config.prefetch must be True, False or None, got 1"),
    (dict(per_sm=0), r"Config.per_sm \(blocks per SM\) must be an int >= 1 or None, got 0"),
])
def test_a_bad_config_is_refused_when_made(kwargs, rule):
    with pytest.raises(ValueError, match=rule):
        Config(**kwargs)


def test_v7_C_past_its_limit(no_gpu):
    p = _problem("v7_fast", N=2, C=65544)
    with pytest.raises(ValueError, match=r"C=65544 is wider than 4 blocks of 512 threads hold; the largest C is 65536"):
        kernels.run("v7_fast", *_args(p))


@pytest.mark.parametrize("stream,error,rule", [
    ("s", TypeError, r"^stream must be None, a PyCUDA Stream, a PyTorch stream or an int CUstream handle, got "
                     r"builtins.str$"),
    (object(), TypeError, r"got builtins.object$"),
    (True, TypeError, r"got bool$"),
    (2.5, TypeError, r"got builtins.float$"),
    (-1, ValueError, r"^stream handle must be a CUstream \(a non-negative int\), got -1$"),
])
def test_a_stream_of_the_wrong_kind(no_gpu, stream, error, rule):
    p = _problem("v2_warp")
    with pytest.raises(error, match=rule):
        kernels.run("v2_warp", *_args(p), stream=stream)


def test_gpuarray_outputs_required(no_gpu):
    f = fakes("v6_last_block")
    with pytest.raises(ValueError, match=r"^dinp and dweight must be given as GPUArrays when the inputs are "
                                         r"GPUArrays$"):
        kernels.run("v6_last_block", f["dout"], f["inp"], f["weight"], f["rstd"])


@pytest.mark.parametrize("version", ["v2_warp", "v6_last_block"])
def test_outputs_sharing_memory_refused(no_gpu, version):
    f = fakes(version)
    cases = [
        (dict(dweight=f["weight"]), r"^dweight is the same memory as weight: an output may not share memory"),
        (dict(dinp=f["dout"]), r"^dinp is the same memory as dout: "),
        (dict(dinp=f["inp"]), r"^dinp is the same memory as inp: "),
        (dict(dinp=FakeGPUArray(f["dinp"].shape, f["dinp"].dtype, int(f["inp"].gpudata) + 64)),
         r"^dinp overlaps inp: "),
        (dict(dweight=FakeGPUArray((16,), f["dweight"].dtype, int(f["dinp"].gpudata) + 64)),
         r"^dinp overlaps dweight: "),
        (dict(dweight=FakeGPUArray((16,), f["dweight"].dtype, int(f["rstd"].gpudata) + 16)),
         r"^dweight overlaps rstd: "),
    ]
    for replace, rule in cases:
        g = {**f, **replace}
        with pytest.raises(ValueError, match=rule):
            kernels.run(version, *[g[k] for k in TENSORS])
    # inputs may share memory with each other (read only): dout is inp
    g = {**f, "dout": f["inp"]}
    assert kernels.check_inputs(version, *[g[k] for k in TENSORS]).N == 6


def test_numpy_outputs_sharing_memory_refused(no_gpu):
    p = reference.random_problem(6, 16, np.float32, seed=5)
    flat = np.zeros(6 * 16 + 16, np.float32)
    cases = [
        (dict(dweight=p["weight"]), r"^dweight is the same memory as weight: "),
        (dict(dinp=p["inp"]), r"^dinp is the same memory as inp: "),
        (dict(dinp=flat[:96].reshape(6, 16), dweight=flat[90:106]), r"^dinp overlaps dweight: "),
        (dict(dout=flat[:96].reshape(6, 16), dinp=flat[16:112].reshape(6, 16)), r"^dinp overlaps dout: "),
    ]
    for replace, rule in cases:
        g = {**p, **replace}
        with pytest.raises(ValueError, match=rule):  # before the GPU is asked for (no_gpu would raise)
            kernels.run("v2_warp", *[g[k] for k in TENSORS])
    g = {**p, "dout": p["inp"]}  # inputs may share memory (read only)
    assert kernels.check_inputs("v2_warp", *[g[k] for k in TENSORS]).N == 6


@pytest.mark.parametrize("version,offset,align", [("v1_naive", 2, 4), ("v2_warp", 1, 4), ("v4_vec_bf16", 8, 16),
                                                  ("v5_two_pass", 2, 16), ("v6_last_block", 4, 16),
                                                  ("v7_fast", 8, 16)])
def test_misaligned_views_refused(no_gpu, version, offset, align):
    f = fakes(version)
    f["inp"] = FakeGPUArray(f["inp"].shape, f["inp"].dtype, int(f["inp"].gpudata) + offset)
    why = "128-bit loads" if align == 16 else "its element size"
    with pytest.raises(ValueError, match=rf"^inp must start on a {align}-byte boundary for {version} \({why}\); its "
                                         rf"address ends in {offset:#x}$"):
        kernels.run(version, *[f[k] for k in TENSORS])


def test_rstd_needs_only_4_byte_alignment(no_gpu):
    f = fakes("v6_last_block")
    f["rstd"] = FakeGPUArray(f["rstd"].shape, np.float32, int(f["rstd"].gpudata) + 4)
    assert kernels.check_inputs("v6_last_block", *[f[k] for k in TENSORS]).N == 6
    f["rstd"] = FakeGPUArray(f["rstd"].shape, np.float32, int(f["rstd"].gpudata) + 2)
    with pytest.raises(ValueError, match=r"^rstd must start on a 4-byte boundary for v6_last_block"):
        kernels.run("v6_last_block", *[f[k] for k in TENSORS])


# ------------------------------------------------------------------------------------------------------
# on the GPU: memory


def _zeros(shape, dtype):
    from pycuda import gpuarray

    a = gpuarray.empty(shape, dtype)
    gpu.driver().memset_d8(a.gpudata, 0, a.nbytes)
    return a


def _free_bytes():
    # what this process's launchers hold, not the device's free memory: other test workers share the GPU
    # (lab/real_process.py measures the device-wide figure in a process of its own)
    rl.gpu.synchronize()
    gc.collect()
    return -launch.held_bytes()


def _memory_case(version):
    """The rung and the C the memory tests use: a C every rung accepts (bf16 rungs need a multiple of 8)."""
    spec = ladder.get(version)
    return spec, 1024 if spec.dtype == np.float32 else 4096


def _first_rows(tensors: dict, N: int) -> list:
    """run()'s arguments, in order, holding the first N rows of the row tensors (views, not copies)."""
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
            out = kernels.run(version, *args)
            assert out[0] is args[4] and out[1] is args[5]

        call(top)  # the launcher and its scratch exist, at the largest N
        before = _free_bytes()
        for N in Ns:
            call(N)
        after = _free_bytes()
        print(f"{version}: device memory in use grew by {(before - after) / MiB:.1f} MiB over {len(Ns)} shapes")
        assert before - after <= 64 * MiB
        assert not np.any(np.asarray(big["dinp"].get(), np.float32))  # zeros in, zeros out: nothing went astray
    finally:
        free(big)


@pytest.mark.gpu
@pytest.mark.parametrize("version", SHIPPED)
def test_numpy_calls_at_many_shapes_free_their_device_buffers(version):
    spec, C = _memory_case(version)
    Ns = [100 + 13 * i for i in range(60)]
    p = reference.random_problem(max(Ns), C, spec.dtype, seed=9)
    kernels.run(version, *[p[k] for k in TENSORS])
    before = _free_bytes()
    for N in Ns:
        args = _first_rows(p, N)
        kernels.run(version, *args)
    after = _free_bytes()
    print(f"{version}: device memory in use grew by {(before - after) / MiB:.1f} MiB over {len(Ns)} NumPy calls")
    assert before - after <= 64 * MiB
    # and the last call was right
    N = Ns[-1]
    args = _first_rows(p, N)
    a, b = compare(version, N, kernels.run(version, *args), reference.backward(*args), label="last of many shapes")
    assert a.ok and b.ok, f"{a}\n{b}"


# ------------------------------------------------------------------------------------------------------
# on the GPU: threads


# Each in a child process: PyCUDA keeps a context stack per thread and aborts the whole process (its
# "context stack was not empty" message) when a thread ends with a context still pushed. A package that
# leaves the context pushed in a worker thread fails these tests instead of ending the test session.


_FOUR_THREADS = """
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from rmsnorm_lessons import check, kernels, ladder, reference
from _gpu_support import TENSORS, bits, reference_of

version, N, C, calls, threads = {version!r}, 1031, 512, 20, 4
spec = ladder.get(version)
problems = [reference.random_problem(N, C, spec.dtype, seed=100 + i) for i in range(threads)]
refs = [reference_of(p) for p in problems]
start = threading.Barrier(threads)


def work(i):
    start.wait(timeout=120)  # all four at once; the first calls also race to make the launcher
    return [kernels.run(version, *[problems[i][k] for k in TENSORS]) for _ in range(calls)]


with ThreadPoolExecutor(threads) as pool:
    results = list(pool.map(work, range(threads)))
print("threads done", flush=True)  # (and ended: the pool is shut down)
for i, outs in enumerate(results):
    assert len(outs) == calls
    for j, got in enumerate(outs):
        report = check.compare_outputs(spec, N, got, refs[i], name=f"{{version}} thread {{i}} call {{j}}")
        assert report.ok, str(report)
        if spec.deterministic:
            assert np.array_equal(bits(got[0]), bits(outs[0][0])) and np.array_equal(bits(got[1]), bits(outs[0][1]))
    if spec.deterministic:  # the same bits as the main thread alone
        alone = kernels.run(version, *[problems[i][k] for k in TENSORS])
        assert np.array_equal(bits(alone[0]), bits(outs[0][0])) and np.array_equal(bits(alone[1]), bits(outs[0][1]))
print("CHILD OK")
"""


def test_the_child_process_harness():  # (CPU) what the thread tests rely on
    out = run_in_child("""
        import rmsnorm_lessons, _gpu_support
        print(rmsnorm_lessons.__name__, _gpu_support.TENSORS[0])
        print("CHILD OK")
    """)
    assert out.splitlines() == ["rmsnorm_lessons dout", "CHILD OK"]
    with pytest.raises(AssertionError, match=r"(?s)exited with status -6 \(killed by signal 6\).*about to abort"):
        run_in_child("import os, sys\nprint('about to abort', file=sys.stderr, flush=True)\nos.abort()")
    with pytest.raises(AssertionError, match=r"(?s)exited with status 1.*ZeroDivisionError"):
        run_in_child("1 / 0")
    with pytest.raises(AssertionError, match=r"exited with status 0"):
        run_in_child("print('no verdict')")


@pytest.mark.gpu
@pytest.mark.parametrize("version", SHIPPED)
def test_four_threads_at_once(version):
    print(run_in_child(_FOUR_THREADS.format(version=version)))


_NEW_THREAD = """
import threading

from rmsnorm_lessons import check, gpu, kernels, ladder, reference
from _gpu_support import TENSORS, free, reference_of, to_device

version, N, C = {version!r}, 257, 1024
spec = ladder.get(version)
p = reference.random_problem(N, C, spec.dtype, seed=61)
want = reference_of(p)


def in_a_new_thread():
    box = {{}}

    def fresh():
        try:
            box["numpy"] = kernels.run(version, *[p[k] for k in TENSORS])  # run() needs nothing else
            with gpu.in_context():  # PyCUDA calls of the thread's own (GPUArrays) need the context current
                dev = to_device(p)
                kernels.run(version, *[dev[k] for k in TENSORS])
                box["gpuarray"] = (dev["dinp"].get(), dev["dweight"].get())
                free(dev)
        except BaseException as exc:  # reported by the main thread
            box["error"] = exc

    t = threading.Thread(target=fresh)
    t.start()
    t.join(timeout=300)
    assert not t.is_alive(), "run() did not return in a new thread"
    if "error" in box:
        raise box["error"]
    for how in ("numpy", "gpuarray"):
        report = check.compare_outputs(spec, N, box[how], want, name=f"{{version}} in a new thread ({{how}})")
        assert report.ok, str(report)


{first}
in_a_new_thread()
print("a thread new to the GPU ran and ended", flush=True)
# the main thread (and another new thread) still can
got = kernels.run(version, *[p[k] for k in TENSORS])
assert check.compare_outputs(spec, N, got, want).ok
in_a_new_thread()
print("CHILD OK")
"""


@pytest.mark.gpu
@pytest.mark.parametrize("first", ["main thread first", "thread first"])
@pytest.mark.parametrize("version", ["v2_warp", "v7_fast"])
def test_a_thread_new_to_the_gpu_can_run(version, first):
    # "thread first": the process's first use of the GPU is in the new thread
    setup = "gpu.require()" if first == "main thread first" else "assert gpu._gpu is None"
    print(run_in_child(_NEW_THREAD.format(version=version, first=setup)))


# ------------------------------------------------------------------------------------------------------
# on the GPU: streams


@pytest.mark.gpu
@pytest.mark.parametrize("version", SHIPPED)
def test_run_on_a_pycuda_stream_queues_and_returns(version):
    drv = gpu.driver()
    spec = ladder.get(version)
    N, C = 1031, 1024
    p = reference.random_problem(N, C, spec.dtype, seed=41)
    stream = drv.Stream()
    warm = to_device(p)  # compiles, makes the launcher and this stream's scratch at this N
    kernels.run(version, *[warm[k] for k in TENSORS], stream=stream)
    stream.synchronize()
    free(warm)

    dev = to_device(p)
    busy(stream, 0.5)
    out = kernels.run(version, *[dev[k] for k in TENSORS], stream=stream)
    still_busy = not stream.is_done()
    stream.synchronize()
    assert out[0] is dev["dinp"] and out[1] is dev["dweight"]
    assert still_busy, "run() waited for the stream"
    a, b = compare(version, N, (dev["dinp"].get(), dev["dweight"].get()), reference_of(p), label="on a stream")
    assert a.ok and b.ok, f"{a}\n{b}"
    free(dev)
    # NumPy inputs on a stream: run waits for its copies back
    busy(stream, 0.2)
    got = kernels.run(version, *_args(p), stream=stream)
    a, b = compare(version, N, got, reference_of(p), label="NumPy on a stream")
    assert a.ok and b.ok, f"{a}\n{b}"


def _torch_tensor(torch, x):
    x = np.ascontiguousarray(x)
    if x.dtype == bf16.bfloat16:
        return torch.from_numpy(x.view(np.int16).copy()).view(torch.bfloat16).cuda()
    return torch.from_numpy(x.copy()).cuda()


def _to_numpy(torch, t, dtype):
    t = t.detach().cpu()
    if np.dtype(dtype) == bf16.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16).view(bf16.bfloat16)
    return t.numpy()


@pytest.mark.gpu
@pytest.mark.parametrize("handle", [False, True], ids=["torch stream", "int handle"])
@pytest.mark.parametrize("version", SHIPPED)
def test_run_on_a_torch_stream_is_ordered_with_it(version, handle):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or not hasattr(torch.cuda, "_sleep"):
        pytest.skip("PyTorch without CUDA (or without torch.cuda._sleep)")
    from pycuda import gpuarray

    gpu.require()
    spec = ladder.get(version)
    N, C = 1031, 1024
    p = reference.random_problem(N, C, spec.dtype, seed=51)
    stale = reference.random_problem(N, C, spec.dtype, seed=52)
    s = torch.cuda.Stream()
    target = s.cuda_stream if handle else s

    def wrap(ts):  # GPUArrays over the torch tensors' memory
        return {k: gpuarray.GPUArray(tuple(t.shape), p[k].dtype, gpudata=int(t.data_ptr())) for k, t in ts.items()}

    warm = {k: _torch_tensor(torch, p[k]) for k in TENSORS}  # compiles, makes the launcher and the bridge
    torch.cuda.synchronize()
    w = wrap(warm)
    kernels.run(version, *[w[k] for k in TENSORS], stream=target)
    s.synchronize()

    t = {k: _torch_tensor(torch, p[k]) for k in TENSORS}
    t["inp"] = _torch_tensor(torch, stale["inp"])  # stale until the copy queued on s below
    final_inp = _torch_tensor(torch, p["inp"])
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        torch.cuda._sleep(int(0.3 * clock_hz()))
        t["inp"].copy_(final_inp)
    g = wrap(t)
    out = kernels.run(version, *[g[k] for k in TENSORS], stream=target)
    still_busy = not s.query()
    with torch.cuda.stream(s):  # queued after run: must see our results
        after = (t["dinp"].clone(), t["dweight"].clone())
    s.synchronize()
    assert out[0] is g["dinp"] and out[1] is g["dweight"]
    assert still_busy, "run() waited for the PyTorch stream"
    want = reference_of(p)
    got = (_to_numpy(torch, after[0], spec.dtype), _to_numpy(torch, after[1], spec.dtype))
    a, b = compare(version, N, got, want, label="on a torch stream")
    assert a.ok and b.ok, f"{a}\n{b}"
    now = (_to_numpy(torch, t["dinp"], spec.dtype), _to_numpy(torch, t["dweight"], spec.dtype))
    assert np.array_equal(bits(now[0]), bits(got[0])) and np.array_equal(bits(now[1]), bits(got[1]))
    del warm, t, final_inp, after
    torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------------------------
# on the GPU: aliasing and alignment


@pytest.mark.gpu
@pytest.mark.parametrize("version", ["v1_naive", "v6_last_block", "v7_fast"])
def test_real_aliased_outputs_refused(version):
    from pycuda import gpuarray

    spec = ladder.get(version)
    N, C = 8, 64
    p = reference.random_problem(N, C, spec.dtype, seed=71)
    dev = to_device(p)
    try:
        def call(**replace):
            g = {**dev, **replace}
            return kernels.run(version, *[g[k] for k in TENSORS])

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
        apart = gpuarray.GPUArray((N, C), spec.dtype, gpudata=int(block.gpudata) + N * C * spec.dtype.itemsize + 256)
        first.set(np.ascontiguousarray(p["inp"]))
        apart.set(np.ascontiguousarray(p["dinp"]))
        call(inp=first, dinp=apart)
        a, b = compare(version, N, (apart.get(), dev["dweight"].get()), reference_of(p), label="views side by side")
        assert a.ok and b.ok, f"{a}\n{b}"
        block.gpudata.free()
    finally:
        free(dev)


@pytest.mark.gpu
@pytest.mark.parametrize("version,offset,align", [("v1_naive", 2, 4), ("v4_vec_bf16", 8, 16), ("v5_two_pass", 8, 16),
                                                  ("v6_last_block", 8, 16), ("v7_fast", 8, 16)])
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
        with pytest.raises(ValueError, match=rf"^inp must start on a {align}-byte boundary for {version}"):
            kernels.run(version, *[g[k] for k in TENSORS])
        # an aligned view of the same block is accepted and right
        ok = gpuarray.GPUArray((N, C), spec.dtype, gpudata=int(block.gpudata) + (4 if align == 4 else 16))
        ok.set(np.ascontiguousarray(p["inp"]))
        g = {**dev, "inp": ok}
        kernels.run(version, *[g[k] for k in TENSORS])
        a, b = compare(version, N, (dev["dinp"].get(), dev["dweight"].get()), reference_of(p), label="aligned view")
        assert a.ok and b.ok, f"{a}\n{b}"
    finally:
        block.gpudata.free()
        free(dev)


# ------------------------------------------------------------------------------------------------------
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
    a, b = compare(rung, N, kernels.run(rung, *_args(p)), reference_of(p), label=f"C={largest}")
    assert a.ok and b.ok, f"{a}\n{b}"
    q = reference.random_problem(N, largest + 8, rung.dtype, seed=92)
    with pytest.raises(ValueError, match=rf"^C={largest + 8} needs \d+ bytes of dynamic shared memory per block for "
                                         rf"v6_last_block \(\+ {static} static\), more than this device allows "
                                         rf"\({facts.shared_memory_per_block_optin} bytes\); the largest C it can "
                                         rf"run is {largest}$"):
        kernels.run(rung, *_args(q))
