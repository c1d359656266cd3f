"""How many clusters of whole-SM blocks a GPU runs at once, asked of the driver for any sm_90 GPU
(rmsnorm_lessons.core.libcuda, gpu.facts): v7_fast's plan for rows split over a cluster launches
that many, so that none waits for a second round (CPU: the probe kernel assembles and the driver is
asked with the right launch; GPU: tests/test_v7_gpu.py compares with v7's own wide kernels)."""
import subprocess

import pytest

from rmsnorm_lessons.core import build, gpu, libcuda
from rmsnorm_lessons.core.ladder import v7_fast


@pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc is not installed")
def test_the_probe_kernel_assembles_for_sm_90(tmp_path):
    ptx = tmp_path / "probe.ptx"
    ptx.write_bytes(libcuda.WHOLE_SM_PTX.rstrip(b"\0"))
    r = subprocess.run([build.find_nvcc(), "-cubin", "-arch=sm_90", "-o", str(tmp_path / "p.cubin"),
                        str(ptx)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert libcuda.WHOLE_SM_PTX.endswith(b"\0")  # the driver reads PTX up to a NUL


class FakeDriver:
    """What LibCuda.resident_clusters asks of libcuda.so.1, recorded; a GPC layout that leaves some
    SMs idle for clusters of 4 (as the H200's: 30, not 33)."""

    def __init__(self):
        self.asked, self.shared_set, self.unloaded = [], None, False

    def cuModuleLoadData(self, module, image):
        assert b".entry rmsnorm_lessons_whole_sm" in image.value
        return 0

    def cuModuleGetFunction(self, function, module, name):
        assert name == b"rmsnorm_lessons_whole_sm"
        return 0

    def cuFuncSetAttribute(self, function, attribute, value):
        assert attribute == libcuda.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        self.shared_set = value
        return 0

    def cuOccupancyMaxActiveClusters(self, count, function, config):
        c = config._obj
        a = c.attrs[0]
        assert c.numAttrs == 1 and a.id == libcuda.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        size = a.value.cluster_dim[0]
        assert list(a.value.cluster_dim) == [size, 1, 1]
        self.asked.append((c.gridDimX, c.blockDimX, c.sharedMemBytes, size))
        count._obj.value = {2: 66, 4: 30, 8: 14}[size]
        return 0

    def cuModuleUnload(self, module):
        self.unloaded = True
        return 0


def test_the_driver_is_asked_for_whole_sm_blocks_in_clusters_of_each_size():
    fake = FakeDriver()
    cu = object.__new__(libcuda.LibCuda)
    cu.lib = fake
    got = cu.resident_clusters((2, 4, 8), 227 * 1024, 132)
    assert got == ((2, 66), (4, 30), (8, 14))
    assert fake.shared_set == 227 * 1024 and fake.unloaded
    assert fake.asked == [(2 * 132, 32, 227 * 1024, 2), (4 * 132, 32, 227 * 1024, 4),
                          (8 * 132, 32, 227 * 1024, 8)]


def test_the_facts_hold_every_size_the_wide_kernels_use():
    assert set(v7_fast.WIDE_CLUSTERS) <= set(gpu.CLUSTER_SIZES)
    assert gpu._resident_clusters("NVIDIA A100", (8, 0), 166912, 108) == ()


def test_where_the_driver_cannot_say_an_h200_keeps_its_saved_figures(monkeypatch, capsys):
    def broken():
        raise OSError("libcuda.so.1: cannot open shared object file")
    monkeypatch.setattr(libcuda, "get", broken)
    assert gpu._resident_clusters(gpu.H200.name, (9, 0), 232448, 132) == gpu.H200.resident_clusters
    assert gpu._resident_clusters("NVIDIA H100 80GB HBM3", (9, 0), 232448, 132) == ()
    assert "did not say how many clusters run at once" in capsys.readouterr().err


def test_a_driver_without_the_cluster_call_keeps_the_others(monkeypatch):
    """libcuda.so.1 of a driver before CUDA 11.8 has no cuOccupancyMaxActiveClusters: the events
    and occupancy calls must still load, and the facts fall back."""
    import ctypes

    class OldDriver:
        def __getattr__(self, name):
            if name == "cuOccupancyMaxActiveClusters":
                raise AttributeError(name)
            fn = lambda *a: 0  # noqa: E731
            return fn
    monkeypatch.setattr(ctypes, "CDLL", lambda path: OldDriver())
    cu = libcuda.LibCuda()
    with pytest.raises(AttributeError):
        cu.lib.cuOccupancyMaxActiveClusters
