"""Canaries (GPU): outputs live inside bigger allocations whose margins are poisoned; no launch may
touch them.

dinp and dweight are placed 4 KiB into a buffer with 4 KiB of a fixed byte pattern before and after
them (the output starts 16-byte aligned; its end is wherever its size puts it, so a write one
element past the end lands in the pattern). After every launch the margins must still hold the
pattern, byte for byte, and the outputs must be right.
"""
import numpy as np
import pytest
from _gpu_support import compare_both, free, reference_of

import rmsnorm_lessons as rl
from rmsnorm_lessons.core import launch, reference

pytestmark = pytest.mark.gpu

MARGIN = 4096
PATTERN = np.frombuffer(bytes.fromhex("deadbeef5aa5c3e1") * (MARGIN // 8), np.uint8)


class Guarded:
    """One device allocation: pattern | payload | pattern (payload starting 16-byte aligned)."""

    def __init__(self, host: np.ndarray):
        import rmsnorm_lessons as rl

        drv = rl.gpu.driver()
        self.drv = drv
        self.host = np.ascontiguousarray(host)
        self.nbytes = self.host.nbytes
        self.total = MARGIN + self.nbytes + MARGIN
        self.alloc = drv.mem_alloc(self.total)
        assert int(self.alloc) % 256 == 0
        image = np.empty(self.total, np.uint8)
        image[:MARGIN] = PATTERN
        image[MARGIN:MARGIN + self.nbytes] = self.host.view(np.uint8).ravel()
        image[MARGIN + self.nbytes:] = PATTERN
        drv.memcpy_htod(self.alloc, image)

    @property
    def ptr(self) -> int:
        return int(self.alloc) + MARGIN

    def read(self):
        image = np.empty(self.total, np.uint8)
        self.drv.memcpy_dtoh(image, self.alloc)
        payload = image[MARGIN:MARGIN + self.nbytes].view(self.host.dtype).reshape(self.host.shape)
        return image[:MARGIN], payload, image[MARGIN + self.nbytes:]

    def assert_margins_intact(self, what: str):
        before, _, after = self.read()
        for side, got in (("before", before), ("after", after)):
            bad = np.flatnonzero(got != PATTERN)
            offset = int(bad[0]) - (MARGIN if side == 'before' else 0) if bad.size else 0
            assert bad.size == 0, (f"{what}: {bad.size} byte(s) of the margin {side} the buffer "
                                   f"were written, first at offset {offset} "
                                   f"from its {'start' if side == 'before' else 'end'}")


def _shapes(spec):
    # odd N; C not a multiple of 256 (the last step of a row is partial); the fp32 versions also get
    # an odd C
    shapes = [(37, 776), (1, 8), (4099, 1032)]
    if spec.c_multiple == 1:
        shapes += [(129, 777), (3, 5)]
    return shapes


@pytest.mark.parametrize("version", rl.ladder.VERSIONS)
def test_margins_around_the_outputs_stay_intact(version):
    from pycuda import gpuarray

    import rmsnorm_lessons as rl

    spec = rl.ladder.get(version)
    for N, C in _shapes(spec):
        p = reference.random_problem(N, C, spec.dtype, seed=N + C)
        dinp, dweight = Guarded(p["dinp"]), Guarded(p["dweight"])
        inputs = {k: gpuarray.to_gpu(np.ascontiguousarray(p[k]))
                  for k in ("dout", "inp", "weight", "rstd")}
        L = launch.Launcher(launch.checked_call(spec, C))
        bufs = launch.Tensors(dinp=dinp.ptr, dweight=dweight.ptr,
                              **{k: int(v.gpudata) for k, v in inputs.items()})
        want = (p["dinp"], p["dweight"])
        for i in range(3):  # the same launcher several times: scratch reused
            L(N, bufs)
            rl.gpu.synchronize()
            dinp.assert_margins_intact(f"{version} N={N} C={C} launch {i}: dinp")
            dweight.assert_margins_intact(f"{version} N={N} C={C} launch {i}: dweight")
            want = reference_of(p, *want)
        got = (dinp.read()[1], dweight.read()[1])
        a, b = compare_both(version, 3 * N, got, want, label=f"N={N} C={C} x3")
        assert a.ok, str(a)
        assert b.ok, str(b)
        dinp.alloc.free()
        dweight.alloc.free()
        L.free()
        free(inputs)
