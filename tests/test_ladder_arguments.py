"""``ladder.plan``, ``ladder.shared_memory`` and a rung's record refuse bad arguments before any
launch is made, each error naming the argument and the rule (CPU). A plan may still show a launch
that cannot run (a block above the kernel's launch bounds, more shared memory than the device has):
that is the launcher's check, and lesson 04 and the occupancy tool ask such "what if"s."""
import pytest

from rmsnorm_lessons.core import ladder
from rmsnorm_lessons.core.ladder import Rung, v7_fast


@pytest.mark.parametrize("version,N,C,options,error,match", [
    ("v1_naive", 8, 768, dict(block_size=33), ValueError, r"block_size .* multiple of 32"),
    ("v1_naive", 8, 768, dict(block_size=4096), ValueError, r"block_size .* up to|to 1024"),
    ("v1_naive", 8, 768, dict(block_size=256.0), TypeError, r"block_size must be an int"),
    ("v4_vec_bf16", 8, 12, {}, ValueError, r"multiple of 8"),
    ("v6_last_block", -5, 768, {}, ValueError, r"N must be at least 0, got -5"),
    ("v6_last_block", 4.5, 768, {}, TypeError, r"N must be an int, got float 4.5"),
    ("v6_last_block", 8, 0, {}, ValueError, r"C must be at least 1, got 0"),
    ("v6_last_block", 8, True, {}, TypeError, r"C must be an int"),
    ("v1_naive", 8, 768, dict(overwrite=True), ValueError, r"not offered by v1_naive"),
    ("v1_naive", 8, 768, dict(overwrite=1), TypeError, r"overwrite must be True or False"),
    ("v3_smem", 1 << 31, 768, {}, ValueError, r"N \(rows\) must be below 2\*\*31"),
    ("v3_smem", 8, 768, dict(config=v7_fast.Config(K=2)), ValueError, r"v3_smem takes none"),
])
def test_plan_refuses_what_run_refuses(version, N, C, options, error, match):
    with pytest.raises(error, match=match):
        ladder.plan(version, N, C, **options)


def test_plan_shows_launches_that_cannot_run():
    # above v6's __launch_bounds__(512): occupancy reports 0 blocks for it rather than no answer
    assert ladder.plan("v6_last_block", 8192, 4096, block_size=1024)[0].block == 1024
    # more shared memory than any GPU gives a block: data here, refused by the launcher
    assert ladder.plan("v3_smem", 8, 10**6)[0].shared == 4 * 10**6


def test_no_rows_plan_no_launches():
    plan = ladder.plan("v7_fast", 0, 768)
    assert list(plan) == [] and "N = 0" in plan.why


def test_shared_memory_checks_its_width_and_block():
    with pytest.raises(ValueError, match=r"C must be at least 1, got -1"):
        ladder.shared_memory("v3_smem", -1)
    with pytest.raises(ValueError, match=r"multiple of 8"):
        ladder.shared_memory("v4_vec_bf16", 12)
    with pytest.raises(ValueError, match=r"block_size .* multiple of 32"):
        ladder.shared_memory("v3_smem", 768, block_size=100)
    assert ladder.shared_memory("v3_smem", 768) == 768 * 4


def _plan(N, C, device, *, block, overwrite=False, config=None):
    return []


@pytest.mark.parametrize("fields,error,match", [
    (dict(kernels="k_one"), TypeError, r"kernels must be a tuple of entry-point names"),
    (dict(kernels=("k one",)), TypeError, r"kernels must be a tuple"),
    (dict(kernels=()), ValueError, r"at least one entry point"),
    (dict(c_multiple=0), ValueError, r"c_multiple must be at least 1, got 0"),
    (dict(c_multiple=2.0), TypeError, r"c_multiple must be an int"),
    (dict(block_size=33), ValueError, r"block_size must be a multiple of 32 up to 1024"),
    (dict(block_size=512, max_block=256), ValueError, r"block_size 512 is above max_block 256"),
    (dict(max_block=2048), ValueError, r"max_block must be a multiple of 32 up to 1024"),
    (dict(plan=3), TypeError, r"plan must be a function"),
    (dict(shared_memory="none"), TypeError, r"shared_memory must be a function"),
    (dict(config_check=1), TypeError, r"config_check must be a function or None"),
    (dict(dtype="float16"), ValueError, r"dtype must be float32 or bfloat16"),
])
def test_a_rung_record_with_a_bad_field_is_refused(fields, error, match):
    good = dict(name="mine", adds="a test", dtype="float32", c_multiple=1, deterministic=False,
                block_size=256, kernels=("k_one",), plan=_plan)
    Rung(**good)  # the good record stands
    with pytest.raises(error, match=match):
        Rung(**{**good, **fields})


def test_rung_from_source_refuses_a_bad_field_before_registering():
    before = ladder.VERSIONS
    with pytest.raises(TypeError, match=r"kernels must be a tuple"):
        ladder.rung_from_source(name="mine_bad", source="extern \"C\" __global__ void k() {}",
                                plan=_plan, kernels="k", dtype="float32")
    with pytest.raises(ValueError, match=r"c_multiple must be at least 1"):
        ladder.rung_from_source(name="mine_bad", source="// cuda", like="v3_smem", c_multiple=0)
    assert ladder.VERSIONS == before
