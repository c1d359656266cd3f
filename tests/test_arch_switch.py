"""The target switch (``RMSNORM_ARCH`` / ``build.use_target``): rungs built as PTX for a virtual
architecture, plans taken for that architecture's facts with the device's SM count.

On CPU: the switch's rules, the target's facts, every v7 plan fitting each target's limits. On a GPU
(marker ``gpu``): v1..v7 pass the checks at the usual odd shapes when built for compute_75 and
compute_80 and JIT-compiled by the driver, and v7 takes the path of that architecture.
"""
import pytest
from _gpu_support import install_fake_cuda

import rmsnorm_lessons as rl
from rmsnorm_lessons.core import build, devices, gpu, ladder, launch
from rmsnorm_lessons.core.ladder import v7_fast
from rmsnorm_lessons.lessons.lesson11 import tuning

VIRTUAL = ("compute_75", "compute_80")
WIDTHS = (768, 4096, 8192, 16384, 32768, 65536)
STATIC = {"rmsnorm_backward_v7": v7_fast.REGISTER_STATIC_SHARED,
          "rmsnorm_backward_v7_staged": v7_fast.STAGED_STATIC_SHARED,
          **{k: v7_fast.WIDE_STATIC_SHARED for k in v7_fast.WIDE_KERNELS}}


@pytest.fixture
def no_target(monkeypatch):
    monkeypatch.delenv(build.ARCH_ENV, raising=False)
    build.use_target(None)
    yield
    build.use_target(None)


def test_the_switch_reads_the_environment_and_use_target_outranks_it(no_target, monkeypatch):
    assert build.target_arch() is None
    monkeypatch.setenv(build.ARCH_ENV, "compute_75")
    assert build.target_arch() == "compute_75"
    build.use_target("compute_80")
    assert build.target_arch() == "compute_80"
    build.use_target(None)
    assert build.target_arch() == "compute_75"


@pytest.mark.parametrize("bad", ["compute_70", "75", "compute_75a", "sm_75a", "garbage", "none"])
def test_a_bad_target_is_refused_naming_the_switch(no_target, monkeypatch, bad):
    with pytest.raises(devices.ArchError, match=rf"^arch={bad!r} is not an architecture the "
                                                r"course builds for: sm_XY .* compute_XY"):
        build.use_target(bad)
    monkeypatch.setenv(build.ARCH_ENV, bad)
    with pytest.raises(devices.ArchError, match=rf"^{build.ARCH_ENV}={bad!r} is not an "):
        build.target_arch()


@pytest.mark.parametrize("given, target", [("compute_75", "compute_75"), ("sm_75", "compute_75"),
                                           ("sm_90a", "compute_90a"), ("", None)])
def test_the_switch_and_arch_take_the_same_spellings(no_target, monkeypatch, given, target):
    monkeypatch.setenv(build.ARCH_ENV, given)
    assert build.target_arch() == target
    if given:
        assert devices.parse_arch(given, "--arch") == given


def test_the_one_message_lists_every_row():
    message = devices.spellings()
    for arch in devices.LIMITS:
        assert arch[3:] in message
    assert "sm_90a" in message and "sm_75a" not in message


@pytest.mark.parametrize("arch", sorted(devices.LIMITS))
def test_target_facts_are_the_arch_limits_with_the_device_sm_count(no_target, arch):
    virtual = arch.replace("sm_", "compute_")
    build.use_target(virtual)
    L = devices.limits(arch)
    if arch in ("sm_100", "sm_120"):  # newer than the H200: its PTX cannot run there
        with pytest.raises(ValueError, match=rf"{virtual} is newer than NVIDIA H200 \(sm_90\)"):
            build.target_facts(gpu.H200)
        return
    f = build.target_facts(gpu.H200)
    assert f.arch == arch
    assert (f.shared_memory_per_block_optin, f.shared_memory_per_multiprocessor,
            f.max_threads_per_multiprocessor, f.registers_per_multiprocessor) == (
        L.shared_per_block_optin, L.shared_per_sm, L.max_threads_per_sm, L.registers_per_sm)
    assert (f.multiprocessors, f.l2_bytes) == (gpu.H200.multiprocessors, gpu.H200.l2_bytes)
    assert f.resident_clusters == (gpu.H200.resident_clusters if arch == "sm_90" else ())


def test_ladder_plan_takes_the_target(no_target, monkeypatch):
    monkeypatch.setattr(gpu, "facts_or_fallback", lambda: (gpu.H200, "saved"))
    assert ladder.plan("v7_fast", 70000, 4096).path == "cp.async"
    build.use_target("compute_75")
    p = ladder.plan("v7_fast", 70000, 4096)
    assert p.path == "register" and "sm_75 has no cp.async" in p.why
    assert p[0].grid <= gpu.H200.multiprocessors  # the device's SMs


def test_the_exercises_plan_for_the_target(no_target, monkeypatch):
    # a machine without a GPU, on a GPU machine too: the H200's saved facts and no measurement
    # (where a GPU is, the search is measured and its verdict is the timings', not the plan's)
    monkeypatch.setattr(gpu, "facts_or_fallback", lambda: (gpu.H200, "saved"))
    monkeypatch.setattr(gpu, "why_unavailable",
                        lambda: "No NVIDIA driver here (libcuda.so.1 is missing).")
    assert gpu.target_facts_or_fallback() == (gpu.H200, "saved")
    build.use_target("compute_75")
    facts, label = gpu.target_facts_or_fallback()
    assert facts.arch == "sm_75" and label == f"{facts.name} (built for compute_75)"
    # the tuning exercise's search plans its variant for the target: at sm_75, as for the H200
    verdict = tuning.check_tuning(v7_fast.Config(K=2, prefetch=False), 512)
    assert verdict.status == "NOT VERIFIED" and "can run 16384x2048" in verdict.message, verdict
    # the rows staged by cp.async are lesson 12's path: refused with a verdict, not a crash
    verdict = tuning.check_tuning(v7_fast.Config(staged=True))
    assert not verdict.passed and verdict.verified and "cp.async" in verdict.message


@pytest.mark.parametrize("C", WIDTHS)
@pytest.mark.parametrize("arch", sorted(devices.LIMITS))
@pytest.mark.parametrize("overwrite", [False, True])
def test_every_v7_plan_fits_the_target(arch, C, overwrite):
    device = devices.target_facts(gpu.H200, arch)
    L = devices.limits(arch)
    try:
        p = ladder.plan("v7_fast", 70000, C, device, overwrite=overwrite)
    except ValueError as exc:  # only what the arch cannot hold is refused, saying why
        assert C not in (768, 4096, 8192), str(exc)
        if C > v7_fast.ROW_MAX_C:
            assert (device.compute_capability < (9, 0) and "needs sm_90 or newer" in str(exc)
                    or "two row slots" in str(exc) and L.shared_per_block_optin < 2 * C * 2)
        else:
            assert (arch, C) == ("sm_75", 16384) and "there C <= 16128" in str(exc)
        return
    for launch_ in p:
        assert launch_.shared + STATIC.get(launch_.kernel, 0) <= L.shared_per_block_optin, launch_
        assert launch_.block <= L.max_threads_per_block
    kernel = {"register": "rmsnorm_backward_v7", "cp.async": "rmsnorm_backward_v7_staged"}
    assert p[0].kernel == kernel.get(p.path, f"rmsnorm_backward_v7_wide{p[0].kernel[-1]}")
    if device.compute_capability < (8, 0):
        assert p.path == "register"
    if arch == "sm_90":
        assert p.path == ("register" if C < 1024 else "cp.async" if C <= v7_fast.ROW_MAX_C
                          else "cluster")


def test_a_t4_plans_fewer_row_groups_where_64_KiB_is_short():
    t4 = devices.target_facts(gpu.H200, "sm_75")
    # overwrite at C=4096: 4 groups of 128 threads want 4 x 16 KiB of dweight; 3 fit a T4's block
    assert v7_fast.row_layout(4096, overwrite=True).groups == 4
    main = ladder.plan("v7_fast", 70000, 4096, t4, overwrite=True)[0]
    assert (main.block, main.shared, dict(main.args)["G"]) == (384, 3 * 4096 * 4, 128)
    on_h200 = ladder.plan("v7_fast", 70000, 4096, gpu.H200, overwrite=True,
                          config=v7_fast.Config(staged=False))[0]
    assert on_h200.block == 512


def test_the_path_says_why():
    for arch, C, taken, why in [("sm_75", 4096, "register", "no cp.async"),
                                ("sm_80", 4096, "cp.async", "staged in shared memory"),
                                ("sm_90", 768, "register", "outside the staged range"),
                                ("sm_90", 32768, "cluster", "cluster of blocks and bulk copies")]:
        p = ladder.plan("v7_fast", 4096, C, devices.target_facts(gpu.H200, arch))
        assert (p.path, why in p.why) == (taken, True), p.why
    assert ladder.plan("v3_smem", 4096, 4096).path is None  # a rung of one path says none


@pytest.mark.parametrize("arch", VIRTUAL)
@pytest.mark.parametrize("version", rl.ladder.VERSIONS)
def test_every_rung_builds_as_ptx_for_the_virtual_arch(version, arch):
    ptx = build.compile_file(version, arch, kind="ptx").binary.decode()
    assert f".target sm_{arch[-2:]}" in ptx
    for kernel in rl.ladder.get(version).kernels:  # v7's wide kernels exist from sm_90 only
        assert (f".entry {kernel}(" in ptx) == (kernel not in v7_fast.WIDE_KERNELS), kernel
    if version == "v7_fast":  # cp.async only where the arch has it (the staged kernel traps below)
        assert ("cp.async" in ptx) == (arch != "compute_75")


def test_ptx_takes_a_virtual_arch_and_a_cubin_a_real_one():
    with pytest.raises(ValueError, match=r"compute_75' for PTX"):
        build.compile_file("v1_naive", "compute_75x", kind="ptx")
    with pytest.raises(ValueError, match=r"arch must look like 'sm_90'"):
        build.compile_file("v1_naive", "compute_75")


def test_the_launcher_plans_for_the_target(no_target, monkeypatch):
    install_fake_cuda(monkeypatch, device=gpu.H200)
    try:
        build.use_target("compute_75")
        L = launch.launcher("v7_fast", 8192)
        p = L.plan(70000)
        assert p.path == "register" and L.device.arch == "sm_75"
        assert p[0].shared <= 64 * 1024 - v7_fast.REGISTER_STATIC_SHARED
        build.use_target(None)
        assert launch.launcher("v7_fast", 8192).plan(70000).path == "cp.async"
    finally:
        launch.release()


# --- on a GPU: the sm_75 and sm_80 code paths, JIT-compiled from PTX on the device in use

SHAPES = [(1, 8), (3, 24), (7, 776), (129, 1600), (1000, 2048), (4097, 768), (513, 5120)]


@pytest.fixture(params=VIRTUAL)
def virtual(request, no_target):
    launch.release()
    build.use_target(request.param)
    yield request.param
    launch.release()
    build.use_target(None)


@pytest.mark.gpu
@pytest.mark.parametrize("version", rl.ladder.VERSIONS)
def test_every_rung_passes_the_checks_built_for_a_virtual_arch(virtual, version):
    from test_gpu_kernels import _case

    widths = SHAPES + ([(33, 8192), (5, 16128)] if version == "v7_fast" else [])
    for N, C in widths:
        a, b = _case(version, N, C, seed=N * 7919 + C)
        assert a.ok, f"{virtual} N={N} C={C}: {a}"
        assert b.ok, f"{virtual} N={N} C={C}: {b}"


@pytest.mark.gpu
def test_v7_takes_the_path_of_the_virtual_arch(virtual):
    L = launch.launcher("v7_fast", 4096)
    want = {"compute_75": "register", "compute_80": "cp.async"}[virtual]
    assert (L.device.arch, L.plan(4097).path) == (virtual.replace("compute", "sm"), want)
    assert L.device.multiprocessors == gpu.facts().multiprocessors
    # the module is the PTX of that arch, JIT-compiled by the driver for the device's own
    assert L.module is build._ptx_module(build.compile_file("v7_fast", virtual, kind="ptx").binary)
    attr = gpu.driver().function_attribute
    main = L.functions[L.plan(4097)[0].kernel]
    assert main.get_attribute(attr.PTX_VERSION) == int(virtual.split("_")[1])
    major, minor = gpu.facts().compute_capability
    assert main.get_attribute(attr.BINARY_VERSION) == 10 * major + minor
    if virtual == "compute_75":
        with pytest.raises(ValueError, match="there C <= 16128"):
            launch.launcher("v7_fast", 16384)


@pytest.mark.gpu
def test_the_switch_spelled_as_arch_runs_the_same_ptx(no_target, monkeypatch):
    """RMSNORM_ARCH=sm_75 is --arch's spelling of compute_75: the same PTX, run by the driver."""
    from test_gpu_kernels import _case

    monkeypatch.setenv(build.ARCH_ENV, "sm_75")
    try:
        L = launch.launcher("v7_fast", 4096)
        assert L.device.arch == "sm_75" and L.plan(4097).path == "register"
        assert L.module is build._ptx_module(build.compile_file("v7_fast", "compute_75",
                                                               kind="ptx").binary)
        a, b = _case("v7_fast", 4097, 4096, seed=7)
        assert a.ok and b.ok, (a, b)
    finally:
        launch.release()


def test_the_gpu_cases_are_the_usual_shapes():
    from test_gpu_kernels import SHAPES as usual

    assert SHAPES == usual


def test_a_bad_switch_in_a_lesson_is_one_line_and_no_traceback(no_target, monkeypatch, capsys):
    from IPython.core.interactiveshell import InteractiveShell

    from rmsnorm_lessons.course import notebook

    monkeypatch.setenv(build.ARCH_ENV, "garbage")
    shell = InteractiveShell.instance()
    try:
        notebook.load_ipython_extension(shell)
        result = shell.run_cell("from rmsnorm_lessons.core import build\nbuild.target_arch()")
        out = capsys.readouterr()
        assert isinstance(result.error_in_exec, devices.ArchError)
        assert "Traceback" not in out.out + out.err
        assert (out.out + out.err).strip().splitlines() == [
            f"{build.ARCH_ENV}='garbage' is not an architecture the course builds for: "
            f"{devices.spellings()}: unset it or fix it, then restart the kernel"]
        shell.run_cell("%%gpu\nprint('launched')")  # a GPU cell does not run: it says why
        out = capsys.readouterr().out
        assert "launched" not in out and "RMSNORM_ARCH='garbage' is not an architecture" in out
        assert "Traceback" not in out
    finally:
        InteractiveShell.clear_instance()
