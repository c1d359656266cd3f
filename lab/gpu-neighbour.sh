#!/usr/bin/env bash
# Does v7 pay for its predecessor's write-backs? Nsight Compute on the 5th v7 (dinp=) main kernel at
# 16384x4096 after each predecessor, caches left as they are (--cache-control none): its duration and the
# DRAM bytes it reads and writes. A launch that writes back another kernel's dirty lines writes more than
# its own 128 MiB of dinp.
#     OUT=dir bash lab/gpu-neighbour.sh
set -u
OUT=${OUT:?OUT must name a folder}
mkdir -p "$OUT"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for before in nothing "v7 (dinp=)" "flat ceiling (dinp=)" "L2 flush (read)"; do
    log="$OUT/ncu-after-${before//[^a-zA-Z0-9]/_}.txt"
    "$NCU" --cache-control none --clock-control none --kernel-name regex:'rmsnorm_backward_v7' --launch-skip 4 \
        --launch-count 1 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
        python lab/neighbour_probe.py --profile "$before" --shapes 16384x4096 > "$log" 2>&1
    echo "after $before: $(grep -E 'gpu__time_duration|dram__bytes' "$log" | tr -s ' ' | tr '\n' ';')"
done
