#!/usr/bin/env bash
# One GPU session for the v9 experiment (lab/v9_async.py): check, bench, and Nsight Compute on v7 and v9
# in overwrite mode at a short-row and a long-row shape. Writes everything under $OUT.
#   OUT=results/<name> VARIANTS=v9,v9w CHECK=v9w PROFILE="v7_fast v9w" bash lab/gpu-v9.sh
set -u
OUT=${OUT:?OUT must name a folder}
VARIANTS=${VARIANTS:-v9,v9_s2,v9_b768,v9_b1024}
CHECK=${CHECK:-$VARIANTS}
PROFILE=${PROFILE:-}
mkdir -p "$OUT"
python lab/v9_async.py check --variants "$CHECK" > "$OUT/v9-check.log" 2>&1
echo "check: $(tail -1 "$OUT/v9-check.log")"
python lab/v9_async.py bench --variants "$VARIANTS" --json "$OUT/v9-bench.json" > "$OUT/v9-bench.log" 2>&1
echo "bench: $(grep -c . "$OUT/v9-bench.log") lines"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for name in $PROFILE; do
    for shape in "32768 1024" "16384 4096"; do
        set -- $shape
        log="$OUT/ncu-$name-$1x$2-ow.txt"
        "$NCU" --clock-control none --kernel-name regex:'v9_async|rmsnorm_backward_v7$' --launch-skip 3 --launch-count 1 \
            --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats \
            python lab/v9_async.py profile "$name" "$1" "$2" --overwrite > "$log" 2>&1
        echo "ncu $name $1x$2 (dinp=): $(grep -E 'Duration|DRAM Throughput|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Executed Instructions  ' "$log" | tr -s ' ' | tr '\n' ';')"
    done
done
