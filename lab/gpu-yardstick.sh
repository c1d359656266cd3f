#!/usr/bin/env bash
# One device call (about 3 minutes) for the corrected yardstick (results/NOTES.md, sixth session): the shipped
# bench as changed, timed with and without the ceiling rows (v7 (dinp=) should agree within 1 %); Nsight
# Compute's DRAM bytes for v7 after each predecessor; the %globaltimer phases of a launch; one peer timed
# through the shared burst loop.
#     OUT=dir bash lab/gpu-yardstick.sh
set -u
OUT=${OUT:?OUT must name a folder}
mkdir -p "$OUT"
for c in --no-ceiling --ceiling; do
    timeout 120 python3 -m rmsnorm_lessons bench v7_fast --shapes 16384x4096,32768x1024 --no-peers --overwrite $c \
        --json "$OUT/bench${c#--}.json" > "$OUT/bench${c#--}.log" 2>&1
    echo "bench $c (exit $?):"
    grep -E "^(v7|stream|copy|timing|noisy)" "$OUT/bench${c#--}.log"
done
# the peers are now timed by bench.time_ms on PyCUDA's events: check one against the old figure (0.2146 ms)
timeout 120 python3 -m rmsnorm_lessons bench v7_fast --shapes 16384x4096 --peer "torch eager" --no-ceiling \
    > "$OUT/peer-eager.log" 2>&1
echo "peer check (exit $?):"
grep -E "^(v7|torch|timing|noisy)" "$OUT/peer-eager.log"
OUT="$OUT/neighbour" timeout 150 bash "$(dirname "${BASH_SOURCE[0]}")/gpu-neighbour.sh"
timeout 150 python3 "$(dirname "${BASH_SOURCE[0]}")/v9_stamps.py" --json "$OUT/stamps.json" 2>&1 | tee "$OUT/stamps.log"
