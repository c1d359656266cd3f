"""Safe in a real process, on the GPU: threads and streams.

* threads (each in a child process: PyCUDA aborts a process whose thread ends with a context
  pushed): four threads calling ``run`` at once, each on its own data, all right (and bitwise
  repeatable for the deterministic versions); a thread that never used the GPU before can call
  ``run``, and end;
* streams: on a PyCUDA stream ``run`` queues and returns (the stream is still busy), and the result
  is right once the stream is synchronised; on a PyTorch stream (or its int handle) ``run`` is
  ordered after the work already queued there and before the work queued after it.
"""
import numpy as np
import pytest
from _gpu_support import (TENSORS, bits, busy, clock_hz, compare_both, free, reference_of,
                          run_in_child, to_device)

import rmsnorm_lessons as rl
from rmsnorm_lessons.core import bf16, gpu, ladder, reference

SHIPPED = tuple(r.name for r in ladder.SHIPPED)


def _args(p):
    return [p[k] for k in TENSORS]


# --------------------------------------------------------------------------------------------------
# on the GPU: threads


# Each in a child process: PyCUDA keeps a context stack per thread and aborts the whole process (its
# "context stack was not empty" message) when a thread ends with a context still pushed. A package
# that leaves the context pushed in a worker thread fails these tests instead of ending the test
# session.


_FOUR_THREADS = """
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from rmsnorm_lessons.core import compare, ladder, reference
import rmsnorm_lessons as rl
from _gpu_support import TENSORS, bits, reference_of

version, N, C, calls, threads = {version!r}, 1031, 512, 20, 4
spec = ladder.get(version)
problems = [reference.random_problem(N, C, spec.dtype, seed=100 + i) for i in range(threads)]
refs = [reference_of(p) for p in problems]
start = threading.Barrier(threads)


def work(i):
    start.wait(timeout=120)  # all four at once; the first calls also race to make the launcher
    return [rl.run(version, *[problems[i][k] for k in TENSORS]) for _ in range(calls)]


with ThreadPoolExecutor(threads) as pool:
    results = list(pool.map(work, range(threads)))
print("threads done", flush=True)  # (and ended: the pool is shut down)
for i, outs in enumerate(results):
    assert len(outs) == calls
    for j, got in enumerate(outs):
        report = compare.compare_outputs(spec, N, got, refs[i],
                                       name=f"{{version}} thread {{i}} call {{j}}")
        assert report.ok, str(report)
        if spec.deterministic:
            assert all(np.array_equal(bits(got[k]), bits(outs[0][k])) for k in (0, 1))
    if spec.deterministic:  # the same bits as the main thread alone
        alone = rl.run(version, *[problems[i][k] for k in TENSORS])
        assert all(np.array_equal(bits(alone[k]), bits(outs[0][k])) for k in (0, 1))
print("CHILD OK")
"""


def test_the_child_process_harness():  # (CPU) what the thread tests rely on
    out = run_in_child("""
        import rmsnorm_lessons, _gpu_support
        print(rmsnorm_lessons.__name__, _gpu_support.TENSORS[0])
        print("CHILD OK")
    """)
    assert out.splitlines() == ["rmsnorm_lessons dout", "CHILD OK"]
    with pytest.raises(AssertionError,
                       match=r"(?s)exited with status -6 \(killed by signal 6\).*about to abort"):
        run_in_child("import os, sys\nprint('about to abort', file=sys.stderr, "
                     "flush=True)\nos.abort()")
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

from rmsnorm_lessons.core import compare, gpu, ladder, reference
import rmsnorm_lessons as rl
from _gpu_support import TENSORS, free, reference_of, to_device

version, N, C = {version!r}, 257, 1024
spec = ladder.get(version)
p = reference.random_problem(N, C, spec.dtype, seed=61)
want = reference_of(p)


def in_a_new_thread():
    box = {{}}

    def fresh():
        try:
            # run() needs nothing else
            box["numpy"] = rl.run(version, *[p[k] for k in TENSORS])
            # PyCUDA calls of the thread's own (GPUArrays) need the context current
            with gpu.in_context():
                dev = to_device(p)
                rl.run(version, *[dev[k] for k in TENSORS])
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
        report = compare.compare_outputs(spec, N, box[how], want,
                                       name=f"{{version}} in a new thread ({{how}})")
        assert report.ok, str(report)


{first}
in_a_new_thread()
print("a thread new to the GPU ran and ended", flush=True)
# the main thread (and another new thread) still can
got = rl.run(version, *[p[k] for k in TENSORS])
assert compare.compare_outputs(spec, N, got, want).ok
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


# --------------------------------------------------------------------------------------------------
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
    rl.run(version, *[warm[k] for k in TENSORS], stream=stream)
    stream.synchronize()
    free(warm)

    dev = to_device(p)
    busy(stream, 0.5)
    out = rl.run(version, *[dev[k] for k in TENSORS], stream=stream)
    still_busy = not stream.is_done()
    stream.synchronize()
    assert out[0] is dev["dinp"] and out[1] is dev["dweight"]
    assert still_busy, "run() waited for the stream"
    a, b = compare_both(version, N, (dev["dinp"].get(), dev["dweight"].get()), reference_of(p),
                   label="on a stream")
    assert a.ok and b.ok, f"{a}\n{b}"
    free(dev)
    # NumPy inputs on a stream: run waits for its copies back
    busy(stream, 0.2)
    got = rl.run(version, *_args(p), stream=stream)
    a, b = compare_both(version, N, got, reference_of(p), label="NumPy on a stream")
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
        return {k: gpuarray.GPUArray(tuple(t.shape), p[k].dtype, gpudata=int(t.data_ptr())) for k,
                t in ts.items()}

    # compiles, makes the launcher and the bridge
    warm = {k: _torch_tensor(torch, p[k]) for k in TENSORS}
    torch.cuda.synchronize()
    w = wrap(warm)
    rl.run(version, *[w[k] for k in TENSORS], stream=target)
    s.synchronize()

    t = {k: _torch_tensor(torch, p[k]) for k in TENSORS}
    t["inp"] = _torch_tensor(torch, stale["inp"])  # stale until the copy queued on s below
    final_inp = _torch_tensor(torch, p["inp"])
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        torch.cuda._sleep(int(0.3 * clock_hz()))
        t["inp"].copy_(final_inp)
    g = wrap(t)
    out = rl.run(version, *[g[k] for k in TENSORS], stream=target)
    still_busy = not s.query()
    with torch.cuda.stream(s):  # queued after run: must see our results
        after = (t["dinp"].clone(), t["dweight"].clone())
    s.synchronize()
    assert out[0] is g["dinp"] and out[1] is g["dweight"]
    assert still_busy, "run() waited for the PyTorch stream"
    want = reference_of(p)
    got = (_to_numpy(torch, after[0], spec.dtype), _to_numpy(torch, after[1], spec.dtype))
    a, b = compare_both(version, N, got, want, label="on a torch stream")
    assert a.ok and b.ok, f"{a}\n{b}"
    now = (_to_numpy(torch, t["dinp"], spec.dtype), _to_numpy(torch, t["dweight"], spec.dtype))
    assert np.array_equal(bits(now[0]), bits(got[0])) and np.array_equal(bits(now[1]), bits(got[1]))
    del warm, t, final_inp, after
    torch.cuda.empty_cache()
