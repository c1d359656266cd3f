#!/usr/bin/env bash
# The workshop room's GPU turns on a real GPU (issue 44), in one call of a few minutes:
#     OUT=out bash tools/gpu-turns.sh          # from the repository root, .venv built
# 1. the room's queue (hub/gpu_lock.py) served from a temporary folder, as the hub runs it;
# 2. two bench runs started together in the room (RMSNORM_LESSONS_GPU_LOCK set): the second must
#    print who is ahead ("GPU turn: 1 ahead of you ...") and wait; neither table says (GPU shared);
# 3. the same two together outside the room, each timing while the other runs, for comparison;
# 4. the tuning check in the room: its verdict says "alone on the room's GPU, turn <lease>", and
#    that lease is in the queue's record of turns (what the dashboard ranks).
# Everything goes to $OUT (default out/): one log per step, and grants.jsonl.
set -euo pipefail
export PYTHONUNBUFFERED=1
PY=${PY:-.venv/bin/python}
OUT=${OUT:-out}
mkdir -p "$OUT"
room=$(mktemp -d)
RMSNORM_HUB_GPU_LOCK_DIR=$room $PY hub/gpu_lock.py > "$OUT/gpu-lock.log" 2>&1 &
lock=$!
trap 'kill $lock 2>/dev/null || true; cp -f "$room/grants.jsonl" "$OUT/" 2>/dev/null || true;
      rm -rf "$room"' EXIT
for _ in $(seq 50); do [ -S "$room/gpu.sock" ] && break; sleep 0.1; done
nvidia-smi -L | tee "$OUT/device.log"
bench() { $PY -m rmsnorm_lessons bench v6_last_block v7_fast --shapes 16384x4096; }

echo "== 2. in the room, two bench runs together"
export RMSNORM_LESSONS_GPU_LOCK=$room/gpu.sock
bench > "$OUT/room-a.log" 2>&1 & a=$!
sleep 1
bench > "$OUT/room-b.log" 2>&1
wait $a
cat "$OUT/room-a.log" "$OUT/room-b.log"
grep -h "GPU turn" "$OUT"/room-?.log || echo "(no queue line: the two runs did not overlap)"
if grep -h "GPU shared" "$OUT"/room-?.log; then
    echo "FAIL: a timing in the room was shared"; exit 1
fi

echo "== 3. outside the room, the same two together"
unset RMSNORM_LESSONS_GPU_LOCK
bench > "$OUT/shared-a.log" 2>&1 & a=$!
bench > "$OUT/shared-b.log" 2>&1
wait $a
cat "$OUT/shared-a.log" "$OUT/shared-b.log"

echo "== 4. the tuning check in the room"
RMSNORM_LESSONS_GPU_LOCK=$room/gpu.sock $PY - <<'PY' | tee "$OUT/tuning.log"
import json, os
from pathlib import Path
from rmsnorm_lessons.core.ladder.v7_fast import Config
from rmsnorm_lessons.lessons.lesson11 import tuning
v = tuning.check_tuning(Config())
print(v)
folder = Path(os.environ["RMSNORM_LESSONS_GPU_LOCK"]).parent
turns = [json.loads(line) for line in (folder / "grants.jsonl").read_text().splitlines()]
print("lease", v.lease, "recorded:", any(t["lease"] == v.lease for t in turns))
PY
