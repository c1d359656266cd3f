#!/usr/bin/env bash
# A lent GPU's session in calls of under ten minutes each, one step a call, its logs under $OUT:
#     OUT=out bash tools/gpu-session.sh STEP        # from the repository root, on the GPU machine
# lessons   re-execute LESSONS (notebooks or lesson numbers; default: the lessons with cells in
#           tests/gpu_cells_pending.txt),
#           tag them, and pack them as $OUT/notebooks.tgz (about 480 s for 02-10 and 13 on an H100);
#           unpack it in the checkout (tar xzf .../notebooks.tgz) before the next call; with
#           SAVE_RUN=<run name> the openings they measure come back as $OUT/openings.json (and
#           lesson 09's chase, table and ceiling as $OUT/lesson09.json)
# suite     the suite against the saved outputs, strict nbval, without the student editions and the
#           mutations (tools/refresh-on-gpu.sh, 450 s deadline)
# students  the student editions under nbval, then the mutations (about 300 s)
# arch      every lesson built for the virtual architecture ARCH (default compute_75), nbval-lax
#           (about 240 s); not beside another step: both slow down and miss their deadlines
# bench     the default bench (python -m rmsnorm_lessons bench), its log and JSON in $OUT
# recheck   after a suite run that failed or ran out of time: re-execute LESSONS (optional,
#           packed as $OUT/notebooks.tgz), then at once the notebooks under strict nbval (NB_JOBS
#           workers, a file a worker) and the test ids listed in IDS (one per line, TEST_JOBS
#           workers), each
#           within LIMIT seconds (default 240); logs nbval.log and tests.log
set -o pipefail
export PYTHONUNBUFFERED=1
STEP=${1:?usage: OUT=DIR bash tools/gpu-session.sh lessons|suite|students|arch|bench|recheck}
OUT=${OUT:-out}; mkdir -p "$OUT"
{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; } \
    > "$OUT/info-$STEP.log" 2>&1
cat "$OUT/info-$STEP.log"
pending_lessons() {
    grep -v '^#' tests/gpu_cells_pending.txt | awk '{print "notebooks/" $1 ".ipynb"}' | sort -u
}
case "$STEP" in
    lessons)
        LESSONS=${LESSONS:-$(pending_lessons | tr '\n' ' ')}
        # lesson numbers (LESSONS="00 02 03") stand for their notebooks
        LESSONS=$(for l in $LESSONS; do
            if [[ $l =~ ^[0-9][0-9]$ ]]; then ls notebooks/"$l"_*.ipynb; else echo "$l"; fi
        done | tr '\n' ' ')
        if [ -z "${LESSONS// /}" ]; then echo "no lesson to re-execute"; exit 0; fi
        # SAVE_RUN=<run name>: every opening the lessons measure is recorded into
        # the run's openings.json (rmsnorm_lessons.course.saved.path), brought back in $OUT
        if [ -n "${SAVE_RUN:-}" ]; then export RMSNORM_SAVE_RUN=$SAVE_RUN; fi
        # shellcheck disable=SC2086  # LESSONS is a word list
        timeout "${LIMIT:-570}" python3 -m rmsnorm_lessons.course.execute $LESSONS 2>&1 \
            | tee "$OUT/execute.log"
        status=$?
        # and lesson 09's own run (its chase, its scale table, its ceiling: lesson09.json)
        if [ -n "${SAVE_RUN:-}" ] && [ -d "results/$SAVE_RUN" ]; then
            cp results/"$SAVE_RUN"/*.json "$OUT/" 2>/dev/null
        fi
        find notebooks -maxdepth 1 -name '*.failed.ipynb' -exec mv {} "$OUT/" \;
        python3 tools/tag_notebooks.py 2>&1 | tee "$OUT/tag.log"
        tar czf "$OUT/notebooks.tgz" notebooks/*.ipynb
        exit "$status" ;;
    suite)
        STUDENTS=0 WORKERS=${WORKERS:-12} EXECUTE=0 DEADLINE_S=${DEADLINE_S:-450} \
            SUITE_ARGS="--ignore=tests/test_mutations.py ${SUITE_ARGS:-}" \
            OUT="$OUT" bash tools/refresh-on-gpu.sh ;;
    students)
        timeout 420 python3 -m pytest -n 14 --dist load -p no:cacheprovider -v --timeout 400 \
            tests/test_student.py -k test_student_edition_runs_under_nbval 2>&1 \
            | tee "$OUT/student.log" | grep -E "PASSED|FAILED|ERROR|passed|failed"
        timeout 150 python3 -m pytest -n 4 --dist load -p no:cacheprovider -m gpu \
            tests/test_mutations.py 2>&1 | tee "$OUT/mutations.log" | tail -5 ;;
    arch)
        RMSNORM_ARCH=${ARCH:-compute_75} timeout 560 python3 -m pytest -n 14 --dist loadfile \
            -p no:cacheprovider --nbval-lax --nbval-current-env notebooks 2>&1 \
            | tee "$OUT/arch-${ARCH:-compute_75}.log" | tail -15 ;;
    recheck)
        if [ -n "${LESSONS:-}" ]; then
            LESSONS=$(for l in $LESSONS; do ls notebooks/"$l"_*.ipynb; done | tr '\n' ' ')
            # shellcheck disable=SC2086  # LESSONS is a word list
            python3 -m rmsnorm_lessons.course.execute $LESSONS 2>&1 | tee "$OUT/execute.log"
            python3 tools/tag_notebooks.py > "$OUT/tag.log" 2>&1
            tar czf "$OUT/notebooks.tgz" notebooks/*.ipynb
        fi
        timeout "${LIMIT:-240}" python3 -m pytest -n "${NB_JOBS:-7}" --dist loadfile \
            -p no:cacheprovider --nbval --nbval-current-env \
            --nbval-sanitize-with nbval_sanitize.cfg notebooks > "$OUT/nbval.log" 2>&1 &
        nbval=$!
        timeout "${LIMIT:-240}" python3 - "${IDS:?IDS=file of test ids}" "${TEST_JOBS:-8}" \
            > "$OUT/tests.log" 2>&1 <<'PY' &
import sys, pytest
ids = [line.strip() for line in open(sys.argv[1]) if line.strip() and not line.startswith("#")]
sys.exit(pytest.main(["-n", sys.argv[2], "--dist", "load", "-p", "no:cacheprovider", "-rfE",
                      "--timeout", "230", *ids]))
PY
        tests=$!
        wait "$nbval"; echo "nbval exit $?" | tee -a "$OUT/nbval.log"
        wait "$tests"; echo "tests exit $?" | tee -a "$OUT/tests.log"
        tail -3 "$OUT/nbval.log"; grep -E "^(FAILED|ERROR)" "$OUT/nbval.log" | head -20
        tail -3 "$OUT/tests.log"; grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -40 ;;
    bench)
        timeout 560 python3 -m rmsnorm_lessons bench --json "$OUT/bench.json" 2>&1 \
            | tee "$OUT/bench.log" ;;
    *)
        echo "unknown step '$STEP': lessons, suite, students, arch, bench or recheck" >&2; exit 2 ;;
esac
