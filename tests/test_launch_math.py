"""Launch arithmetic (CPU): ceil_div, shared memory per version, bytes moved, grid sizes of every plan.

The plans are run against a fake launcher that records what would be launched instead of launching.
"""
from types import SimpleNamespace

import numpy as np
import pytest

from rmsnorm_lessons import kernels
from rmsnorm_lessons.kernels import ceil_div

H200_SMS = 132
SEED_LADDER = ("v1_naive", "v2_warp", "v3_smem", "v4_vec_bf16", "v5_two_pass", "v6_last_block")


class FakeAllocation:
    """Stands for a pycuda DeviceAllocation: converts to its address with int()."""

    def __init__(self, address):
        self.address = address

    def __int__(self):
        return self.address


class FakeLauncher:
    """Looks like a :class:`kernels.Launcher` to a plan; records scratch, memsets and launches."""

    def __init__(self, version, N, C, multiprocessors=H200_SMS, block_size=None, overwrite=False):
        self.spec = kernels.get(version)
        self.N, self.C = N, C
        self.block_size = block_size or self.spec.block_size
        self.multiprocessors = multiprocessors
        self.overwrite = overwrite
        self.smem = self.spec.dynamic_smem(C, self.block_size)
        self.launches = []  # (kernel, grid, block, args)
        self.scratches = {}  # name -> (nbytes, zero)
        self.memsets = []
        self._next = 0x7000_0000_0000

    def scratch(self, name, nbytes, zero=False):
        if name not in self.scratches:
            self.scratches[name] = (nbytes, zero, FakeAllocation(self._next))
            self._next += ceil_div(nbytes, 256) * 256 + 256
        return self.scratches[name][2]

    def memset32(self, ptr, count, stream=None):
        self.memsets.append((ptr, count))

    def call(self, kernel, grid, stream, *args, block=None):
        self.launches.append((kernel, tuple(int(g) for g in grid), block or self.block_size, args))


def _plan(version, N, C, **kw):
    L = FakeLauncher(version, N, C, **kw)
    L.spec.plan(L, kernels.Buffers(0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 0x6000), None)
    return L


@pytest.mark.parametrize("a,b,q", [(0, 4, 0), (1, 4, 1), (4, 4, 1), (5, 4, 2), (1000, 256, 4), (1024, 256, 4),
                                   (1025, 256, 5), (2**31, 8192, 2**18), (2**40 + 1, 2**20, 2**20 + 1)])
def test_ceil_div(a, b, q):
    assert ceil_div(a, b) == q


def test_dynamic_smem_formulas_at_known_C():
    smem = {v: kernels.get(v).dynamic_smem for v in SEED_LADDER}
    assert smem["v1_naive"](4096, 256) == 0
    assert smem["v2_warp"](4096, 256) == 0
    assert smem["v3_smem"](768, 256) == 768 * 4
    assert smem["v4_vec_bf16"](1600, 256) == 1600 * 4
    # v5: rounded C (to 256) floats of block dweight + 4 floats per lane of warps 1..15
    assert smem["v5_two_pass"](1024, 512) == (1024 + 480 * 4) * 4 == 11776
    assert smem["v5_two_pass"](1600, 512) == (1792 + 1920) * 4 == 14848
    # v6: the seed's (2 * rounded_C + 2 * (block_size - 32) * 4) * 4
    assert smem["v6_last_block"](1024, 512) == (2 * 1024 + 2 * 480 * 4) * 4 == 23552
    assert smem["v6_last_block"](768, 512) == (2 * 768 + 3840) * 4 == 21504
    assert smem["v6_last_block"](776, 512) == (2 * 1024 + 3840) * 4
    # C > 4096 passes the 48 KiB a launch gets without opting in
    assert smem["v6_last_block"](4096, 512) <= kernels.DEFAULT_SMEM_LIMIT < smem["v6_last_block"](4352, 512)


@pytest.mark.parametrize("version", kernels.VERSIONS)
def test_dynamic_smem_is_a_byte_count(version):
    spec = kernels.get(version)
    Cs = list(range(spec.c_multiple, 20000, spec.c_multiple * 37))
    need = [spec.dynamic_smem(C, spec.block_size) for C in Cs]
    assert all(isinstance(n, int) and n >= 0 and n % 4 == 0 for n in need)
    if version in SEED_LADDER:  # (a later version may trade shared memory per row group for C)
        assert need == sorted(need)


def test_bytes_moved():
    v1, v6 = kernels.get("v1_naive"), kernels.get("v6_last_block")
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
    L = _plan("v1_naive", N, 768)
    assert [(k, g, b) for k, g, b, _ in L.launches] == [("rmsnorm_backward_v1", (ceil_div(N, 256),), 256)]
    assert L.launches[0][3][-2:] == (N, 768)
    L = _plan("v2_warp", N, 768)
    assert [(k, g, b) for k, g, b, _ in L.launches] == [("rmsnorm_backward_v2", (ceil_div(N, 8),), 256)]


@pytest.mark.parametrize("N", [1, 8, 9, 100, 4224, 4225, 70000])
def test_persistent_grids(N):
    C = 1600
    want4 = max(1, min(H200_SMS * 4, ceil_div(N, 8)))  # 256 threads = 8 warps, 4 blocks per SM
    L = _plan("v3_smem", N, C)
    assert [(k, g) for k, g, _, _ in L.launches] == [("rmsnorm_backward_v3", (want4,))]

    L = _plan("v4_vec_bf16", N, C)
    assert [(k, g, b) for k, g, b, _ in L.launches] == [("rmsnorm_backward_v4", (want4,), 256),
                                                        ("add_dweight_v4", (ceil_div(C, 256),), 256)]
    nbytes, _, ptr = L.scratches["dweight_accum"]
    assert nbytes == C * 4
    assert L.memsets == [(ptr, C)]  # the fp32 accumulator is zeroed before every launch

    want2 = max(1, min(H200_SMS * 2, ceil_div(N, 16)))  # 512 threads = 16 warps, 2 blocks per SM
    L = _plan("v5_two_pass", N, C)
    assert [(k, g, b) for k, g, b, _ in L.launches] == [("rmsnorm_backward_v5", (want2,), 512),
                                                        ("reduce_dweight_v5", (ceil_div(C, 256),), 256)]
    assert L.scratches["partials"][0] == want2 * C * 4
    assert L.launches[1][3][-2:] == (want2, C)  # the reducer is told how many partial rows there are

    L = _plan("v6_last_block", N, C)
    assert [(k, g, b) for k, g, b, _ in L.launches] == [("rmsnorm_backward_v6", (2 * H200_SMS,), 512)]
    nbytes, zero, _ = L.scratches["scratch"]
    assert nbytes == (32 + 2 * C * 2 * H200_SMS) * 4 and zero


def test_grids_follow_the_multiprocessor_count():
    assert _plan("v6_last_block", 10**5, 1024, multiprocessors=108).launches[0][1] == (216,)
    assert _plan("v3_smem", 10**5, 1024, multiprocessors=108).launches[0][1] == (432,)
    assert _plan("v5_two_pass", 10**5, 1024, multiprocessors=78).launches[0][1] == (156,)


@pytest.mark.parametrize("N,C", [(1, 8), (37, 776), (70000, 1600), (4096, 16384)])
@pytest.mark.parametrize("version", kernels.VERSIONS)
def test_every_plan_launches_its_kernels_with_legal_configurations(version, N, C):
    spec = kernels.get(version)
    if C % spec.c_multiple:
        pytest.skip(f"{version} needs C % {spec.c_multiple} == 0")
    L = _plan(version, N, C)
    assert L.launches, f"{version} launched nothing"
    assert L.launches[0][0] == spec.kernels[0], "the first launch must be the main kernel (it gets the shared memory)"
    for kernel, grid, block, args in L.launches:
        assert kernel in spec.kernels
        assert all(1 <= g < 2**31 for g in grid)
        assert 32 <= block <= 1024 and block % 32 == 0
        for a in args:
            # Launcher.call packs Python ints as the kernels' int parameters: a pointer passed as a plain
            # int would be truncated to 32 bits, so pointers must be np.uintp or allocations
            if isinstance(a, int):
                assert 0 <= a < 2**31, f"{kernel}: {a!r} is passed as an int parameter but looks like a pointer"
            else:
                assert isinstance(a, (np.uintp, FakeAllocation)), f"{kernel}: unexpected argument {a!r}"


def test_buffers_hold_device_pointers():
    b = kernels.Buffers(1, 2, 3, 4, 5, 2**40)
    assert all(isinstance(getattr(b, k), np.uintp) for k in ("dinp", "dweight", "dout", "inp", "weight", "rstd"))
    assert int(b.rstd) == 2**40


# ------------------------------------------------------------------------------------------------------
# Launcher.call: argument packing and error translation, with a fake driver and fake kernels


class _FakeDriverError(Exception):
    pass


def _bare_launcher(version, N, C, fail=False):
    L = object.__new__(kernels.Launcher)  # skip __init__: it needs a GPU
    L.spec = kernels.get(version)
    L.N, L.C, L.block_size, L.overwrite = N, C, L.spec.block_size, False
    L.multiprocessors = H200_SMS
    L.smem = L.spec.dynamic_smem(C, L.block_size)
    L.drv = SimpleNamespace(Error=_FakeDriverError)
    L._scratch = {}
    calls = []

    def make(name):
        def fn(*args, **kw):
            if fail:
                raise _FakeDriverError("cuLaunchKernel failed: invalid argument")
            calls.append((name, args, kw))
        return fn

    L.functions = {k: make(k) for k in L.spec.kernels}
    return L, calls


def test_launcher_call_packs_ints_and_pointers():
    L, calls = _bare_launcher("v2_warp", 100, 768)
    L.call("rmsnorm_backward_v2", (13,), None, FakeAllocation(2**40), np.uintp(0x2000), 100, 768)
    (name, args, kw), = calls
    assert [type(a) for a in args] == [np.uintp, np.uintp, np.int32, np.int32]
    assert int(args[0]) == 2**40
    assert kw == dict(block=(256, 1, 1), grid=(13, 1, 1), shared=0, stream=None)


def test_launcher_call_gives_the_main_kernel_its_shared_memory_only():
    L, calls = _bare_launcher("v5_two_pass", 100, 1024)
    L.call("rmsnorm_backward_v5", (7,), "s", 1, 100)
    L.call("reduce_dweight_v5", (4,), "s", 1, 7, 1024, block=256)
    assert calls[0][2]["shared"] == 11776 and calls[0][2]["block"] == (512, 1, 1)
    assert calls[1][2]["shared"] == 0 and calls[1][2]["block"] == (256, 1, 1)
    assert calls[1][2]["stream"] == "s"


def test_a_failed_launch_is_a_launch_error_naming_the_version():
    L, _ = _bare_launcher("v3_smem", 100, 768, fail=True)
    with pytest.raises(kernels.LaunchError, match=r"^v3_smem: launching rmsnorm_backward_v3 failed: .*invalid argument"):
        L.spec.plan(L, kernels.Buffers(1, 2, 3, 4, 5, 6), None)


def test_launcher_with_N_zero_launches_nothing():
    L, calls = _bare_launcher("v6_last_block", 0, 1024)
    L(kernels.Buffers(1, 2, 3, 4, 5, 6))
    assert calls == []
