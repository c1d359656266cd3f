#!/usr/bin/env bash
# Smoke-test a GPU machine: environment facts, the GPU tests, the CLI check and a short benchmark;
# logs in $OUT.
#     OUT=out bash tools/gpu-smoke.sh
# from the repository root, with the package and PyCUDA installed
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
nvidia-smi -L 2>&1 | tee "$OUT/info.log"
python3 -m rmsnorm_lessons info --bandwidth 2>&1 | tee -a "$OUT/info.log"
# what every lesson's set-up cell prints here: the GPU, its capability and driver, the CUDA tools
python3 -c "from rmsnorm_lessons.course import doctor; print(doctor.report(None))" 2>&1 \
    | tee -a "$OUT/info.log"
python3 -m pytest -x -q -p no:cacheprovider tests -m gpu ${SMOKE_PYTEST_ARGS:-} 2>&1 \
    | tee "$OUT/pytest-gpu.log" | tail -25
python3 -m rmsnorm_lessons check 2>&1 | tee "$OUT/check.log" | tail -12
python3 -m rmsnorm_lessons bench ${SMOKE_BENCH_VERSIONS:-} \
    --shapes ${SMOKE_SHAPES:-8192x1024,16384x4096} --repeats 30 --json "$OUT/bench.json" 2>&1 \
    | tee "$OUT/bench.log" | tail -20
