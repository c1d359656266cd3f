"""Launch arithmetic (CPU): ceil_div, shared memory per version, bytes moved, the grid of every
plan, and the launcher executing a plan against a fake driver.

Plans are data (``ladder.plan`` on ``gpu.H200`` or a made-up device): the grids, blocks and scratch
are read from them. The launcher (:class:`rmsnorm_lessons.core.launch.Launcher`) is the real one,
with the driver, the device and the compiler replaced by recording fakes
(``_gpu_support.install_fake_cuda``): how it packs arguments, gives shared memory, zeroes and keeps
scratch, and names a failed launch.
"""
import dataclasses

import numpy as np
import pytest
from _gpu_support import FakeStream, install_fake_cuda

import rmsnorm_lessons as rl
from rmsnorm_lessons.core import gpu, ladder, launch, validate
from rmsnorm_lessons.core.ladder import Scratch, Tensor, ceil_div

H200 = gpu.H200
H200_SMS = 132
SHIPPED = tuple(r.name for r in ladder.SHIPPED)


def _plan(version, N, C, device=H200, **kw):
    return ladder.plan(version, N, C, device, **kw)


def _kgb(plan):
    return [(L.kernel, L.grid, L.block) for L in plan]


def _scratch(plan):
    return {v.name: v for L in plan for _, v in L.args if isinstance(v, Scratch)}


def test_the_saved_h200_facts():
    assert H200.multiprocessors == H200_SMS and H200.shared_memory_per_block_optin == 227 * 1024


@pytest.mark.parametrize("a,b,q", [(0, 4, 0), (1, 4, 1), (4, 4, 1), (5, 4, 2), (1000, 256, 4),
                                   (1024, 256, 4),
                                   (1025, 256, 5), (2**31, 8192, 2**18),
                                   (2**40 + 1, 2**20, 2**20 + 1)])
def test_ceil_div(a, b, q):
    assert ceil_div(a, b) == q


def test_dynamic_smem_formulas_at_known_C():
    smem = lambda v, C, block: ladder.shared_memory(v, C, block)  # noqa: E731
    assert smem("v1_naive", 4096, 256) == 0
    assert smem("v2_warp", 4096, 256) == 0
    assert smem("v3_smem", 768, 256) == 768 * 4
    assert smem("v4_vec_bf16", 1600, 256) == 1600 * 4
    # v5: rounded C (to 256) floats of block dweight + 4 floats per lane of warps 1..15
    assert smem("v5_two_pass", 1024, 512) == (1024 + 480 * 4) * 4 == 11776
    assert smem("v5_two_pass", 1600, 512) == (1792 + 1920) * 4 == 14848
    # v6: the seed's (2 * rounded_C + 2 * (block_size - 32) * 4) * 4
    assert smem("v6_last_block", 1024, 512) == (2 * 1024 + 2 * 480 * 4) * 4 == 23552
    assert smem("v6_last_block", 768, 512) == (2 * 768 + 3840) * 4 == 21504
    assert smem("v6_last_block", 776, 512) == (2 * 1024 + 3840) * 4
    # C > 4096 passes the 48 KiB a launch gets without opting in
    assert smem("v6_last_block", 4096,
                512) <= launch.DEFAULT_SMEM_LIMIT < smem("v6_last_block", 4352, 512)
    # the default block is the rung's
    assert ladder.shared_memory("v6_last_block", 1024) == smem("v6_last_block", 1024, 512)
    assert ladder.shared_memory("v6_last_block", 1024, 128) == (2 * 1024 + 2 * 96 * 4) * 4


@pytest.mark.parametrize("version", SHIPPED)
def test_dynamic_smem_is_a_byte_count(version):
    spec = ladder.get(version)
    Cs = list(range(spec.c_multiple, 20000, spec.c_multiple * 37))
    need, beyond = [], []
    for C in Cs:
        try:
            need.append(ladder.shared_memory(version, C))
        except ValueError:  # a C this version cannot run at all
            beyond.append(C)
    assert all(isinstance(n, int) and n >= 0 and n % 4 == 0 for n in need)
    assert not beyond
    if version == "v7_fast":  # wider rows are split over a cluster, up to 65536
        assert ladder.shared_memory(version, 65536) > 0
        with pytest.raises(ValueError, match="the largest C is 65536"):
            ladder.shared_memory(version, 65544)
    # a rung with variants (v7) may trade shared memory per row group for C; the others grow with C
    if ladder.get(version).config_check is None:
        assert need == sorted(need)


def test_bytes_moved():
    v1, v6 = ladder.get("v1_naive"), ladder.get("v6_last_block")
    N, C = 8192, 1024
    # dout, inp, dinp read, dinp written; rstd; weight, dweight read, dweight written
    assert v1.bytes_moved(N, C) == 4 * N * C * 4 + N * 4 + 3 * C * 4
    assert v6.bytes_moved(N, C) == 4 * N * C * 2 + N * 4 + 3 * C * 2
    assert v6.bytes_moved(N, C, overwrite=True) == 3 * N * C * 2 + N * 4 + 3 * C * 2
    # bf16 halves every tensor's bytes but rstd's
    assert 2 * (v6.bytes_moved(N, C) - N * 4) == v1.bytes_moved(N, C) - N * 4
    assert v6.bytes_moved(0, C) == 3 * C * 2


@pytest.mark.parametrize("N", [1, 7, 8, 9, 1000, 70000])
def test_v1_and_v2_grids(N):
    plan = _plan("v1_naive", N, 768)
    assert _kgb(plan) == [("rmsnorm_backward_v1", ceil_div(N, 256), 256)]
    assert [v for _, v in plan[0].args[-2:]] == [N, 768]
    assert _kgb(_plan("v2_warp", N, 768)) == [("rmsnorm_backward_v2", ceil_div(N, 8), 256)]
    assert _kgb(_plan("v2_warp", N, 768,
                      block_size=128)) == [("rmsnorm_backward_v2", ceil_div(N, 4), 128)]


@pytest.mark.parametrize("N", [1, 8, 9, 100, 4224, 4225, 70000])
def test_persistent_grids(N):
    C = 1600
    want4 = max(1, min(H200_SMS * 4, ceil_div(N, 8)))  # 256 threads = 8 warps, 4 blocks per SM
    assert _kgb(_plan("v3_smem", N, C)) == [("rmsnorm_backward_v3", want4, 256)]

    plan = _plan("v4_vec_bf16", N, C)
    assert _kgb(plan) == [("rmsnorm_backward_v4", want4, 256),
                          ("add_dweight_v4", ceil_div(C, 256), 256)]
    accum = _scratch(plan)["dweight_accum"]
    assert accum.nbytes == C * 4
    assert accum.zero == "each"  # the fp32 accumulator is zeroed before every launch
    assert dict(plan[0].args)["dweight_accum"] is accum
    assert dict(plan[1].args)["dweight_accum"] is accum

    want2 = max(1, min(H200_SMS * 2, ceil_div(N, 16)))  # 512 threads = 16 warps, 2 blocks per SM
    plan = _plan("v5_two_pass", N, C)
    assert _kgb(plan) == [("rmsnorm_backward_v5", want2, 512),
                          ("reduce_dweight_v5", ceil_div(C, 256), 256)]
    assert _scratch(plan)["partials"].nbytes == want2 * C * 4
    # every partial row is written before it is read
    assert _scratch(plan)["partials"].zero == "none"
    # the reducer is told how many partial rows there are
    assert [v for _, v in plan[1].args[-2:]] == [want2, C]

    plan = _plan("v6_last_block", N, C)
    assert _kgb(plan) == [("rmsnorm_backward_v6", 2 * H200_SMS, 512)]
    s = _scratch(plan)["scratch"]
    assert s.nbytes == (32 + 2 * C * 2 * H200_SMS) * 4 and s.zero == "once"


def test_grids_follow_the_multiprocessor_count():
    def device(sms):
        return dataclasses.replace(H200, multiprocessors=sms)

    assert _plan("v6_last_block", 10**5, 1024, device(108))[0].grid == 216
    assert _plan("v3_smem", 10**5, 1024, device(108))[0].grid == 432
    assert _plan("v5_two_pass", 10**5, 1024, device(78))[0].grid == 156
    assert _plan("v7_fast", 10**5, 1024, device(78))[0].grid == 78


@pytest.mark.parametrize("N,C", [(1, 8), (37, 776), (70000, 1600), (4096, 16384)])
@pytest.mark.parametrize("version", SHIPPED)
def test_every_plan_launches_its_kernels_with_legal_configurations(version, N, C):
    spec = ladder.get(version)
    if C % spec.c_multiple:
        pytest.skip(f"{version} needs C % {spec.c_multiple} == 0")
    plan = _plan(version, N, C)
    assert plan, f"{version} launched nothing"
    # the first launch is a main kernel (it gets the shared memory): the version's first, or for
    # v7_fast one of its other row paths; the final sums come after it
    first = plan[0].kernel
    assert first in spec.kernels and not first.startswith("reduce"), first
    for L in plan:
        assert L.kernel in spec.kernels
        assert 1 <= L.grid < 2**31
        assert 32 <= L.block <= 1024 and L.block % 32 == 0
        for name, a in L.args:
            # the launcher passes ints as the kernels' 32-bit int parameters and Tensors/Scratch as
            # 64-bit addresses: a pointer given as an int would be truncated
            if isinstance(a, int):
                assert not isinstance(a, bool) and 0 <= a < 2**31, f"{L.kernel}: {name}={a!r}"
            else:
                assert isinstance(a, (Tensor,
                                      Scratch)), f"{L.kernel}: unexpected argument {name}={a!r}"


def test_tensors_hold_device_pointers():
    t = launch.Tensors(1, 2, 3, 4, 5, 2**40)
    assert t._fields == ("dinp", "dweight", "dout", "inp", "weight", "rstd") == ladder.TENSOR_NAMES
    assert t.rstd == 2**40 and t.dinp == 1


# --------------------------------------------------------------------------------------------------
# the launcher, against a fake driver


@pytest.fixture
def fake_cuda(monkeypatch):
    """A fake driver (and the H200's facts) for the launcher; the launcher cache is emptied around
    it."""
    launch.release()
    made = []

    def install(**kw):
        drv = install_fake_cuda(monkeypatch, **kw)
        made.append(drv)
        return drv

    yield install
    launch.release()  # (still with the fakes in place)


def test_launcher_packs_pointers_and_ints(fake_cuda):
    drv = fake_cuda()
    L = launch.Launcher(launch.checked_call("v2_warp", 768))
    t = launch.Tensors(2**40, 2**40 + 4096, 3 << 32, 4 << 32, 5 << 32, 6 << 32)
    L(100, t)
    (_, kernel, grid, block, stream, args, shared), = drv.launches()
    assert kernel == "rmsnorm_backward_v2" and grid == (13, 1, 1) and block == (256, 1, 1)
    assert stream is None and shared == 0
    assert [type(a) for a in args] == [np.uintp] * 6 + [np.int32] * 2
    assert [int(a) for a in args] == list(t) + [100, 768]
    assert L.module.functions["rmsnorm_backward_v2"].codes == "PPPPPPii"


def test_launcher_gives_the_main_kernel_its_shared_memory_only(fake_cuda):
    drv = fake_cuda()
    L = launch.Launcher(launch.checked_call("v5_two_pass", 1024))
    s = FakeStream()
    L(100, launch.Tensors(1, 2, 3, 4, 5, 6), s)
    main, reduce = drv.launches()
    assert main[1] == "rmsnorm_backward_v5" and main[6] == 11776 and main[3] == (512, 1, 1)
    assert reduce[1] == "reduce_dweight_v5" and reduce[6] == 0 and reduce[3] == (256, 1, 1)
    assert main[4] is s and reduce[4] is s
    # the partials: one scratch buffer, passed to both kernels
    assert int(main[5][1]) == int(reduce[5][1]) == drv.allocations[0].address
    assert [int(a) for a in reduce[5][2:]] == [7, 1024]  # ceil(100 / 16) partial rows


def test_a_failed_launch_is_a_launch_error_naming_the_version(fake_cuda):
    fake_cuda(fail=True)
    L = launch.Launcher(launch.checked_call("v3_smem", 768))
    with pytest.raises(launch.LaunchError,
                       match=r"^v3_smem: launching rmsnorm_backward_v3 failed: .*invalid argument"):
        L(100, launch.Tensors(1, 2, 3, 4, 5, 6))
    assert rl.launch.LaunchError is launch.LaunchError


def test_a_plan_naming_a_kernel_the_module_lacks(fake_cuda):
    # add_dweight_v4 missing from the "compiled" module
    fake_cuda(kernels_in_module=("rmsnorm_backward_v4",))
    with pytest.raises(ValueError,
                       match=r"v4_vec_bf16: no entry point 'add_dweight_v4' in its CUDA "
                                         r"\(is it extern \"C\" __global__\?\)"):
        launch.Launcher(launch.checked_call("v4_vec_bf16", 1024))


def test_launcher_with_N_zero_launches_nothing(fake_cuda):
    drv = fake_cuda()
    L = launch.Launcher(launch.checked_call("v6_last_block", 1024))
    L(0, launch.Tensors(1, 2, 3, 4, 5, 6))
    assert drv.launches() == [] and drv.allocations == []


def test_scratch_zeroed_before_each_call(fake_cuda):
    drv = fake_cuda()
    v4 = launch.Launcher(launch.checked_call("v4_vec_bf16", 1024))
    s = FakeStream()
    for _ in range(3):
        v4(5000, launch.Tensors(1, 2, 3, 4, 5, 6), s)
    (accum,) = drv.allocations
    memsets = [e for e in drv.log if e[0] == "memset"]
    # once before every call, on its stream, and before that call's launches (not between them)
    assert [e[0] for e in drv.log
            if e[0] in ("memset", "launch")] == ["memset", "launch", "launch"] * 3
    assert memsets == [("memset", accum.address, 0, 1024 * 4, s)] * 3


def test_scratch_zeroed_once_when_made(fake_cuda):
    drv = fake_cuda()
    s = FakeStream()
    v6 = launch.Launcher(launch.checked_call("v6_last_block", 1024))
    for _ in range(3):
        v6(5000, launch.Tensors(1, 2, 3, 4, 5, 6), s)
    allocs = [e for e in drv.log if e[0] == "alloc"]
    memsets = [e for e in drv.log if e[0] == "memset"]
    # zeroed once, when made
    assert len(allocs) == 1 and memsets == [("memset", allocs[0][1], 0, allocs[0][2], s)]
    assert allocs[0][2] == (32 + 2 * 1024 * 2 * H200_SMS) * 4
    assert [e[0] for e in drv.log] == ["alloc", "memset", "launch", "launch", "launch"]


def test_scratch_grows_with_N_and_never_per_N(fake_cuda):
    drv = fake_cuda()
    L = launch.Launcher(launch.checked_call("v5_two_pass", 1024))
    s = FakeStream()
    t = launch.Tensors(1, 2, 3, 4, 5, 6)
    L(16, t, s)  # one block: 1024 floats of partials
    assert [a.nbytes for a in drv.allocations] == [1024 * 4]
    L(160, t, s)  # ten blocks: a bigger buffer, the old one freed after the stream is waited for
    assert [a.nbytes for a in drv.allocations] == [1024 * 4, 10 * 1024 * 4]
    assert drv.allocations[0].freed and s.synchronized == 1
    for N in range(1, 161, 7):  # smaller N: the buffer is reused
        L(N, t, s)
    assert len(drv.allocations) == 2 and len(drv.live()) == 1
    for N in range(5000, 9000, 100):  # past the persistent grid's size: never more
        L(N, t, s)
    assert [a.nbytes for a in drv.live()] == [2 * H200_SMS * 1024 * 4]
    assert len(drv.allocations) == 3
    assert len(L._plans) <= launch.PLANS_KEPT


def test_each_stream_gets_its_own_scratch(fake_cuda):
    drv = fake_cuda()
    L = launch.Launcher(launch.checked_call("v6_last_block", 1024))
    t = launch.Tensors(1, 2, 3, 4, 5, 6)
    streams = [FakeStream() for _ in range(launch.STREAMS_KEPT + 3)]
    for s in streams[:2]:
        L(100, t, s)
    a, b = (int(e[5][2]) for e in drv.launches())
    assert a != b, "two streams share one scratch (v6's ticket counter)"
    L(100, t, streams[0])
    assert int(drv.launches()[-1][5][2]) == a  # the same stream: the same scratch
    # more streams than kept: the oldest's scratch is freed, after waiting for it
    for s in streams[2:]:
        L(100, t, s)
    assert len(drv.live()) == launch.STREAMS_KEPT
    assert streams[0].synchronized >= 1 or streams[1].synchronized >= 1
    L.free()
    assert drv.live() == []


def test_more_than_48k_of_shared_memory_is_opted_in_once(fake_cuda):
    drv = fake_cuda(static=16)
    small = launch.Launcher(launch.checked_call("v6_last_block", 1024))  # 23552 B: no opt-in
    assert not [e for e in drv.log if e[0] == "set_attribute"]
    # 2 * 8192 * 4 + 15360 B: past 48 KiB
    big = launch.Launcher(launch.checked_call("v6_last_block", 8192))
    big(100, launch.Tensors(1, 2, 3, 4, 5, 6))
    opted = [e for e in drv.log if e[0] == "set_attribute"]
    assert opted == [("set_attribute", "rmsnorm_backward_v6", "MAX_DYNAMIC_SHARED_SIZE_BYTES",
                      H200.shared_memory_per_block_optin - 16)]  # the device's whole limit
    need = ladder.shared_memory("v6_last_block", 8192)
    assert drv.launches()[-1][6] == need > launch.DEFAULT_SMEM_LIMIT
    small(100, launch.Tensors(1, 2, 3, 4, 5, 6))


@pytest.mark.parametrize("version", [v for v in SHIPPED if ladder.get(v).shared_memory is not
                                     ladder.get("v1_naive").shared_memory and v != "v7_fast"])
def test_more_shared_memory_than_the_device_has_is_refused(fake_cuda, version):
    rung = ladder.get(version)
    static = 16
    fake_cuda(static=static)
    limit = H200.shared_memory_per_block_optin
    largest = launch.largest_c(rung, limit - static, rung.block_size)
    assert largest % rung.c_multiple == 0
    assert static + ladder.shared_memory(version, largest) <= limit < static + ladder.shared_memory(
        version, largest + rung.c_multiple)
    launch.Launcher(launch.checked_call(version, largest))  # fits
    too_big = largest + rung.c_multiple
    need = ladder.shared_memory(version, too_big)
    with pytest.raises(ValueError,
                       match=rf"^C={too_big} needs {need} bytes of dynamic shared memory per block "
                                         rf"for {version} \(\+ {static} static\), more than this "
                                         rf"device allows \({limit} bytes\); the largest C it can "
                                         rf"run is {largest}$"):
        # the device's own limit, past the course-wide one validate.call checks first
        launch.Launcher(validate.Call(rung, too_big, rung.block_size, False))


@pytest.mark.parametrize("version", ladder.with_shared_dweight())
def test_a_device_of_48k_refuses_what_needs_more(fake_cuda, version):
    rung = ladder.get(version)
    small = dataclasses.replace(H200, name="48 KiB GPU",
                                shared_memory_per_block_optin=launch.DEFAULT_SMEM_LIMIT)
    fake_cuda(device=small)
    C = next(C for C in range(rung.c_multiple, 1 << 18, rung.c_multiple)
             if ladder.shared_memory(version, C) > launch.DEFAULT_SMEM_LIMIT)
    launch.Launcher(launch.checked_call(version, C - rung.c_multiple))
    with pytest.raises(ValueError,
                       match=rf"^C={C} needs \d+ bytes of dynamic shared memory per block for "
                             rf"{version}"):
        launch.Launcher(launch.checked_call(version, C))


def test_the_launcher_cache_is_bounded_and_keyed(fake_cuda):
    fake_cuda()
    a = launch.launcher("v7_fast", 1024)
    assert launch.launcher("v7_fast", 1024) is a
    assert launch.launcher(ladder.get("v7_fast"), 1024) is a
    for other in (launch.launcher("v7_fast", 1024, overwrite=True),
                  launch.launcher("v7_fast", 2048),
                  launch.launcher("v7_fast", 1024, block_size=256),
                  launch.launcher("v7_fast", 1024, config=ladder.v7_fast.Config(K=1))):
        assert other is not a
    made = [launch.launcher("v2_warp", C) for C in range(8, 8 * (launch.CACHE_SIZE + 5), 8)]
    assert launch.launcher("v2_warp", made[-1].C) is made[-1]
    assert launch.launcher("v2_warp", 8) is not made[0]  # the oldest was dropped (and freed)
