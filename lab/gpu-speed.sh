#!/usr/bin/env bash
# One device call (about 5 minutes) for issue 32's fixed costs: programmatic dependent launch checked
# (every spelling bitwise v7) and timed beside v7 and the ceiling (lab/pdl_probe.py), then the
# %globaltimer phases of a launch (lab/v9_stamps.py). Predictions: results/NOTES.md, "The gap between
# launches" and "Fixed costs from %globaltimer stamps".
#     OUT=dir bash lab/gpu-speed.sh
set -u
OUT=${OUT:?OUT must name a folder}
HERE=$(dirname "${BASH_SOURCE[0]}")
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi -L > "$OUT/info.log" 2>&1
timeout 120 python3 "$HERE/pdl_probe.py" check 2>&1 | tee "$OUT/pdl-check.log" | tail -3
if grep -q "^0 failed" "$OUT/pdl-check.log"; then  # never time a spelling that is not right
    timeout 240 python3 "$HERE/pdl_probe.py" bench --json "$OUT/pdl.json" 2>&1 | tee "$OUT/pdl.log"
fi
timeout 150 python3 "$HERE/v9_stamps.py" --json "$OUT/stamps.json" 2>&1 | tee "$OUT/stamps.log"
