"""``import rmsnorm_lessons`` loads the core only: the inspection, profiling, plotting and timing
tools load when first asked for (checked in a fresh interpreter, CPU)."""
import json
import subprocess
import sys
from pathlib import Path

import rmsnorm_lessons as rl

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("sass", "sass_parse", "occupancy", "nsight", "plots", "bench", "peers", "widgets",
         "sanitizer", "libcuda")


def _loaded_after(code: str) -> set:
    script = f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, check=True, env={"PYTHONPATH": str(ROOT),
                                                       "PATH": "/usr/bin:/bin"})
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_the_core_loads_none_of_the_tools():
    loaded = _loaded_after("import rmsnorm_lessons")
    heavy = sorted(m for m in loaded if m.split(".")[-1] in HEAVY
                   and m.startswith("rmsnorm_lessons"))
    assert heavy == [], f"import rmsnorm_lessons loaded {heavy}"
    assert {"rmsnorm_lessons.core.run", "rmsnorm_lessons.core.devices",
            "rmsnorm_lessons.core.ladder.v7_fast"} <= loaded
    assert "matplotlib" not in loaded and "pycuda" not in loaded


def test_the_tools_load_on_first_use():
    loaded = _loaded_after("import rmsnorm_lessons as rl\nrl.occupancy")
    assert {"rmsnorm_lessons.inspection.occupancy", "rmsnorm_lessons.inspection.sass"} <= loaded


def test_the_lessons_reach_nsight_bottleneck_lazily_and_it_stays_light():
    # the lessons' cells call rl.profiles.bottleneck after `import rmsnorm_lessons as rl`
    loaded = _loaded_after("import rmsnorm_lessons as rl\nassert callable(rl.profiles.bottleneck)")
    assert {"rmsnorm_lessons.inspection.nsight", "rmsnorm_lessons.inspection.nsight_csv"} <= loaded
    assert not {"matplotlib", "pycuda", "rmsnorm_lessons.speed.bench"} & loaded


def test_validate_and_occupancy_read_one_table():
    from rmsnorm_lessons.core import devices
    from rmsnorm_lessons.inspection import occupancy

    assert occupancy.LIMITS is devices.LIMITS and occupancy.limits is devices.limits
    from rmsnorm_lessons.core.ladder import arguments

    assert arguments.devices is devices and rl.validate.shared_memory is arguments.shared_memory
