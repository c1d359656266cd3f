#!/bin/sh
# On a GPU machine: the CPU twin and the GPU must agree (issue 46). Runs, in one call:
#  * tests/test_twin_gpu.py: every kernel exercise's solution and every mutant of the mutation
#    suite, judged by its check on the GPU and again with the GPU hidden (the CPU twin judges);
#    the verdicts must be the same (PASS for the solutions, NOT YET for the slips);
#  * the twin's own tests and the mutation suite's GPU run, with the score line.
# About 89 texts x (a GPU check + a twin check), 10-20 s each on 2 cores: use -n with
# pytest-xdist where it is installed (JOBS=8 tools/twin-gpu-agreement.sh).
set -e
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
JOBS=${JOBS:-0}
if [ "$JOBS" -gt 0 ]; then XDIST="-n $JOBS --dist load"; else XDIST="-p no:xdist"; fi
$PY -m pytest -q $XDIST -m gpu tests/test_twin_gpu.py tests/test_mutations.py
$PY -m pytest -q -p no:xdist tests/test_twin_rungs.py tests/test_twin_hazards.py \
    tests/test_twin_bf16.py
