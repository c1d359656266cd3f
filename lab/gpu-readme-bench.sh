#!/usr/bin/env bash
# The README's benchmark on the GPU machine: the seed's design, v7 in both modes, the same-bytes ceilings
# and every peer (PyTorch eager, torch.compile in default and max-autotune-no-cudagraphs mode, Liger,
# Quack's whole call, kernel alone and tuned entry point) in ONE process. Compiling and autotuning the
# peers takes longer than one device call may run, so the bench runs in the background and a later call
# on the same (still warm) machine waits for it:
#     bash lab/gpu-readme-bench.sh start DIR          # starts it, returns at once
#     bash lab/gpu-readme-bench.sh wait DIR SECONDS   # waits up to SECONDS; prints the log's new lines
#     bash lab/gpu-readme-bench.sh probe DIR NxC      # each peer alone at one shape, in the background,
#                                                     # one process per peer, its wall time logged
#     bash lab/gpu-readme-bench.sh tune DIR NxC,...   # only the two autotuners (max-autotune, Quack tuned)
#                                                     # at these shapes, in the background, filling the caches
#     bash lab/gpu-readme-bench.sh pack FILE          # the autotuners' caches as one .tar.xz (to bring back)
#     bash lab/gpu-readme-bench.sh unpack FILE        # ... and into place on a later machine
#     (run DIR: the bench itself, what start runs in its own session)
# The two autotuners search for minutes a shape (about 67 s and 94 s at 16384x4096, results/NOTES.md), so the ten
# shapes take longer than a session's device time. Both keep what they found on disk (torch's inductor
# cache, Quack's autotune cache), here under $PEER_CACHE: searched in one session (tune, pack, brought back
# through $OUT), they are carried into the session of the README's run (unpack), which then times them
# without searching. The README names the session that searched.
# DIR is a folder on the GPU machine (say /tmp/readme-bench), outside the copied tree, so it survives
# between calls; copy it to $OUT when done. When the bench ends, MANIFEST.json in DIR records the run
# (lab/manifest.py; set LAB_COMMIT to the commit measured: the copied tree has no git).
# Quack needs `python lab/peer_wheels.py unpack` first and its PYTHONPATH exported.
set -u
cmd=${1:?start or wait}
DIR=${2:?a folder}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PEERS=(--peer "torch eager" --peer torch.compile --peer Liger-Kernel --peer "torch.compile max-autotune"
       --peer Quack --peer "Quack kernel" --peer "Quack tuned")
PEER_CACHE=${PEER_CACHE:-/tmp/peer-caches}
# Quack keeps its winners on disk only when asked (QUACK_CACHE_AUTOTUNING=1: quack/autotuner.py, 0.6.5)
export TORCHINDUCTOR_CACHE_DIR=$PEER_CACHE/inductor QUACK_CACHE_DIR=$PEER_CACHE/quack QUACK_CACHE_AUTOTUNING=1
case "$cmd" in
tune)
    shapes=${3:?shapes NxC,...}
    mkdir -p "$DIR" "$PEER_CACHE"
    rm -f "$DIR/done" "$DIR/bench.log"
    setsid nohup bash "${BASH_SOURCE[0]}" run-tune "$DIR" "$shapes" < /dev/null > /dev/null 2>&1 &
    echo "tuning started in $DIR"
    ;;
run-tune)
    cd "$DIR" || exit 1
    for peer in "torch.compile max-autotune" "Quack tuned"; do
        start=$(date +%s)
        echo "== $peer at $3" >> bench.log
        python3 -m rmsnorm_lessons bench v7_fast --shapes "$3" --peer "$peer" --no-ceiling --no-overwrite \
            --json "tune-${peer// /_}.json" >> bench.log 2>&1
        echo "== $peer: exit $?, $(( $(date +%s) - start )) s in all" >> bench.log
    done
    touch done
    ;;
pack)
    file=${2:?}
    tar -C "$PEER_CACHE" -cJf "$file" . && echo "packed $(du -h "$file" | cut -f1) from $(du -sh "$PEER_CACHE" | cut -f1)"
    ;;
unpack)
    file=${2:?}
    mkdir -p "$PEER_CACHE" && tar -C "$PEER_CACHE" -xJf "$file" && echo "unpacked $(du -sh "$PEER_CACHE" | cut -f1) into $PEER_CACHE"
    ;;
start)
    mkdir -p "$DIR"
    rm -f "$DIR/done" "$DIR/bench.log"
    # its own session: the bench outlives the device call that started it
    setsid nohup bash "${BASH_SOURCE[0]}" run "$DIR" < /dev/null > /dev/null 2>&1 &
    echo "started in $DIR"
    ;;
run)
    cd "$DIR" || exit 1
    python3 -m rmsnorm_lessons bench v6_last_block v7_fast "${PEERS[@]}" --json bench.json --plot bench.png \
        > bench.log 2>&1
    status=$?
    echo "exit $status" >> bench.log
    [ "$status" = 0 ] && python3 "$ROOT/lab/manifest.py" "$DIR" bench.json bench.png -- \
        python -m rmsnorm_lessons bench v6_last_block v7_fast "${PEERS[@]}" --json bench.json --plot bench.png \
        >> bench.log 2>&1
    touch done
    ;;
probe)
    shape=${3:?a shape NxC}
    mkdir -p "$DIR"
    rm -f "$DIR/done" "$DIR/bench.log"
    setsid nohup bash "${BASH_SOURCE[0]}" run-probe "$DIR" "$shape" < /dev/null > /dev/null 2>&1 &
    echo "probe started in $DIR"
    ;;
run-probe)
    cd "$DIR" || exit 1
    for ((i = 1; i < ${#PEERS[@]}; i += 2)); do
        peer=${PEERS[$i]}
        start=$(date +%s)
        echo "== $peer at $3" >> bench.log
        python3 -m rmsnorm_lessons bench v7_fast --shapes "$3" --peer "$peer" --no-ceiling \
            --json "probe-${peer// /_}.json" >> bench.log 2>&1
        echo "== $peer: exit $?, $(( $(date +%s) - start )) s in all" >> bench.log
    done
    touch done
    ;;
wait)
    limit=${3:?seconds}
    seen=0
    start=$(date +%s)
    while :; do
        if [ -f "$DIR/bench.log" ]; then
            total=$(wc -l < "$DIR/bench.log")
            [ "$total" -gt "$seen" ] && sed -n "$((seen + 1)),${total}p" "$DIR/bench.log" && seen=$total
        fi
        [ -f "$DIR/done" ] && { echo "bench done"; exit 0; }
        [ $(( $(date +%s) - start )) -ge "$limit" ] && { echo "bench still running"; exit 3; }
        sleep 5
    done
    ;;
*)
    echo "usage: $0 start DIR | wait DIR SECONDS" >&2
    exit 2
    ;;
esac
