#!/usr/bin/env bash
# v7_fast on a GPU machine in one go (< 8 minutes): checked, benchmarked against v6 and the peers, its
# launch variants timed, the streaming ceiling measured. From the repository root, with the package and
# PyCUDA installed (torch for the peers; Liger-Kernel wheels in .whl/ if you have them):
#     OUT=results/<name> bash lab/gpu-v7.sh
# Writes up to 10 files under $OUT: info.log check.log pytest.log bench.log bench.json bench.png ceiling.log
# ceiling.json variants.log variants.json (the last two not with V7_VARIANTS=0), and MANIFEST.json: which
# command wrote which file (lab/manifest.py). Without git on the machine, set LAB_COMMIT to the commit.
# Prints short tails as it goes and a summary at the end.
set -o pipefail
export PYTHONUNBUFFERED=1 TQDM_DISABLE=1
OUT=${OUT:-out}
mkdir -p "$OUT"
START=$(date +%s)
BUDGET=${V7_BUDGET:-450}  # seconds for the whole script; each step gets at most what is left

left() {  # seconds left for a step: min(cap, budget - elapsed), at least 10
    local cap=$1 now
    now=$(date +%s)
    local rest=$((BUDGET - (now - START)))
    [ "$rest" -lt 10 ] && rest=10
    [ "$cap" -lt "$rest" ] && echo "$cap" || echo "$rest"
}
step() { echo; echo "=== $* ($(($(date +%s) - START)) s)"; }
record() {  # record LOG COMMAND...: MANIFEST.json says LOG and the files under $OUT the command names came from it
    local log=$1 arg files=()
    shift
    files+=("$OUT/$log")
    for arg in "$@"; do
        case "$arg" in "$OUT"/*) [ -f "$arg" ] && files+=("$arg") ;; esac
    done
    python3 lab/manifest.py "$OUT" "${files[@]}" -- "$@" > /dev/null || echo "could not record $log in MANIFEST.json"
}
run() {  # run LOG CAP COMMAND...: the command's output to $OUT/LOG, recorded; on failure, the log's last lines
    local log=$1 cap=$2 rc
    shift 2
    timeout "$(left "$cap")" "$@" > "$OUT/$log" 2>&1
    rc=$?
    echo "exit $rc$([ $rc -eq 124 ] && echo ' (timed out)')"
    [ $rc -ne 0 ] && tail -n 8 "$OUT/$log"
    record "$log" "$@"
    return 0
}

step "Liger-Kernel from .whl/"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --upgrade --no-index --no-deps --target /tmp/site .whl/*.whl 2>&1 | tail -n 2
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
else
    echo "no .whl/ here (carry it): Liger-Kernel will be skipped"
fi

step "info"
{
    nvidia-smi -L
    nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu --format=csv
    python3 -m rmsnorm_lessons info
    python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
    python3 -c "import importlib.metadata as m; print('liger-kernel', m.version('liger-kernel'))"
    python3 - <<'EOF'
from rmsnorm_lessons import build
for arch in ("sm_90", "sm_80"):
    for r in build.resources("v7_fast", arch).values():
        print(f"{r.kernel} {arch}: {r.registers} registers, {r.stack_bytes} B stack, "
              f"spills {r.spill_stores}/{r.spill_loads} B, {r.shared_bytes} B static shared")
EOF
} > "$OUT/info.log" 2>&1
record info.log bash lab/gpu-v7.sh "(its info step)"
tail -n 12 "$OUT/info.log"

step "check: v7_fast against float64, both modes, launch variants, determinism"
run check.log 100 python3 lab/v7_gpu.py check
grep -E "^FAIL|failed \(" "$OUT/check.log" | tail -n 12

step "bench: v6_last_block v7_fast and the peers at the 8 shapes"
run bench.log 260 python3 -m rmsnorm_lessons bench v6_last_block v7_fast --json "$OUT/bench.json" \
    --plot "$OUT/bench.png"
grep -E "^(skip|peer|torch)|Error" "$OUT/bench.log" | head -n 12

step "ceiling: the elementwise kernel with v7's bytes, against v7_fast as planned, both modes"
run ceiling.log 60 python3 lab/v7_explore.py --variants default --json "$OUT/ceiling.json"
sed -n '/^fastest per shape/,$p' "$OUT/ceiling.log"

if [ "${V7_VARIANTS:-1}" != 0 ]; then  # V7_VARIANTS=0 skips this step (lab/v7_explore.py covers more)
    step "variants: K, prefetch, block, reduce mode, per shape"
    run variants.log 90 python3 lab/v7_gpu.py variants --json "$OUT/variants.json"
fi

step "pytest tests/test_v7.py"
run pytest.log 60 python3 -m pytest -q -x -p no:cacheprovider tests/test_v7.py
tail -n 1 "$OUT/pytest.log"

step "SUMMARY"
echo "--- check:"; grep -E "^FAIL|failed \(" "$OUT/check.log" | tail -n 6
echo "--- pytest:"; tail -n 1 "$OUT/pytest.log"
echo "--- bench (ms, GB/s, % of copy, speedup over v6):"
if grep -q '^copy bandwidth' "$OUT/bench.log"; then
    sed -n '/^copy bandwidth/,$p' "$OUT/bench.log" | grep -v "^wrote" | head -n 75
else  # stopped before the end (the versions' rows may be in bench.json already)
    tail -n 40 "$OUT/bench.log"
fi
if [ -f "$OUT/variants.log" ]; then
    echo "--- variants, fastest per shape:"
    sed -n '/^fastest accumulate-mode variant/,$p' "$OUT/variants.log" | grep -v "^wrote" | head -n 10
fi
echo "--- $(($(date +%s) - START)) s; files in $OUT:"; ls "$OUT"
