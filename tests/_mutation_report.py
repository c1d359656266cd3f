"""The mutation score in pytest's terminal summary (tests/test_mutations.py).

Each mutant's test records ``("mutation", json)`` in its report's ``user_properties`` (which
pytest-xdist carries from the workers to the controller); this plugin gathers them and prints
one line, e.g. ``mutation score: 57/57 caught (compile-only 9, GPU 48); survivors: none``,
and one for the run without a GPU (compile-only, or judged by the CPU twin).
Load it with ``pytest_plugins = ["tests._mutation_report"]`` in tests/conftest.py or ``-p
tests._mutation_report``.
"""
from __future__ import annotations

import json

_RESULTS: dict[str, dict] = {}


def pytest_runtest_logreport(report):
    if report.when != "call":
        return
    for name, value in getattr(report, "user_properties", ()):
        if name == "mutation":
            record = json.loads(value)
            record["gpu"] = "on_the_gpu" in report.nodeid
            _RESULTS[f"{record['gpu']}:{record['node']}"] = record


def _names(records) -> str:
    return ", ".join(f"lesson{r['exercise'][:2]} {r['id']}" for r in records) or "none"


def score_lines(results) -> list[str]:
    """The summary's lines for ``results`` (the recorded dicts)."""
    lines = []
    on_gpu = [r for r in results if r["gpu"]]
    if on_gpu:
        caught = [r for r in on_gpu if r["stage"] in ("compile-only", "GPU")]
        static = sum(r["stage"] == "compile-only" for r in on_gpu)
        lines.append(f"mutation score: {len(caught)}/{len(on_gpu)} caught (compile-only {static}, "
                     f"GPU {len(caught) - static}); survivors: "
                     f"{_names(r for r in on_gpu if r['stage'] == 'survived')}; rejected by nvcc: "
                     f"{_names(r for r in on_gpu if r['stage'] == 'nvcc rejected')}"
                     + (f"; not judged (CUDA context lost): "
                        f"{_names(r for r in on_gpu if r['stage'] == 'not judged')}"
                        if any(r["stage"] == "not judged" for r in on_gpu) else ""))
    cpu = [r for r in results if not r["gpu"]]
    if cpu:
        static = sum(r["stage"] == "compile-only" for r in cpu)
        on_cpu = sum(r["stage"] == "CPU twin" for r in cpu)
        judged = [r for r in cpu if r["stage"] != "needs a GPU"]
        lines.append(f"mutation score without a GPU: {static + on_cpu}/{len(judged)} caught "
                     f"(compile-only {static}, CPU twin {on_cpu}), "
                     f"{len(cpu) - len(judged)} need a GPU to be judged; survivors: "
                     f"{_names(r for r in cpu if r['stage'] == 'survived')}; rejected by nvcc: "
                     f"{_names(r for r in cpu if r['stage'] == 'nvcc rejected')}")
    return lines


def pytest_terminal_summary(terminalreporter):
    lines = score_lines(list(_RESULTS.values()))
    if lines:
        terminalreporter.section("mutation score")
        for line in lines:
            terminalreporter.write_line(line)
