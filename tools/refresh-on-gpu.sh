#!/usr/bin/env bash
# On a GPU machine: re-execute every lesson in place (the outputs the notebooks ship with), tag the
# cells whose output depends on the machine, then run the suite against them as `make test` does
# (strict nbval), in parallel. Logs, the suite's JUnit XML and the re-executed notebooks
# (notebooks.tgz) land in $OUT.
#     OUT=out DEADLINE_S=590 bash tools/refresh-on-gpu.sh      # from the repository root
# DEADLINE_S bounds the whole script: the suite gets what the lessons left of it (a suite stopped at
# the deadline still leaves its per-test log, suite.log). SUITE (default "tests notebooks") is what
# pytest runs; EXECUTE=0 skips the re-execution; LESSONS (default notebooks/[0-9]*.ipynb) names the
# lessons to re-execute; KEEP (a folder) also gets a copy of the re-executed lessons.
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
START=$(date +%s)
DEADLINE_S=${DEADLINE_S:-3600}
WORKERS=${WORKERS:-8}
nvidia-smi -L 2>&1 | tee "$OUT/info.log"
if [ "${EXECUTE:-1}" = 1 ]; then
    # shellcheck disable=SC2086  # LESSONS is a word list
    python3 -m rmsnorm_lessons.course.execute ${LESSONS:-notebooks/[0-9]*.ipynb} 2>&1 \
        | tee "$OUT/execute.log"
    # what a lesson ran up to its error (rmsnorm_lessons.course.execute writes it beside the
    # lesson): to read, not for nbval
    find notebooks -maxdepth 1 -name '*.failed.ipynb' -exec mv {} "$OUT/" \;
    python3 tools/tag_notebooks.py 2>&1 | tee "$OUT/tag.log"
    tar czf "$OUT/notebooks.tgz" notebooks/*.ipynb
    if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp notebooks/*.ipynb "$KEEP/"; fi
fi
LEFT=$(( DEADLINE_S - ($(date +%s) - START) - 5 ))
echo "suite (${SUITE:-tests notebooks}): ${LEFT} s left" | tee "$OUT/suite.log"
# each failure's traceback as it happens (conftest.py)
export RMSNORM_FAILURE_LOG="$OUT/failures.log"
# The student edition's nbval run of each lesson is one test, minutes long for the long lessons;
# under --dist loadfile they would queue on one worker (a notebook's cells must stay on one, so the
# suite keeps loadfile). Where the suite is the default, they run beside it, in their own pytest,
# one per worker. STUDENTS=0 leaves them out (to run them in a call of their own).
STUDENT=test_student_edition_runs_under_nbval
DESELECT=()
if [ -z "${SUITE:-}" ]; then
    DESELECT=(-k "not $STUDENT")
fi
if [ -z "${SUITE:-}" ] && [ "${STUDENTS:-1}" != 0 ]; then
    timeout "$LEFT" python3 -m pytest -n "${STUDENT_WORKERS:-4}" --dist load -p no:cacheprovider \
        -v \
        --timeout 900 tests/test_student.py -k "$STUDENT" --junitxml "$OUT/junit-student.xml" \
        > "$OUT/student.log" 2>&1 &
    STUDENT_PID=$!
fi
# shellcheck disable=SC2086  # SUITE and SUITE_ARGS are word lists
timeout "$LEFT" python3 -m pytest -n "$WORKERS" --dist loadfile -p no:cacheprovider -v \
    --timeout 300 \
    --nbval --nbval-current-env --nbval-sanitize-with nbval_sanitize.cfg ${SUITE:-tests notebooks} \
    --ignore=tests/test_browser.py "${DESELECT[@]}" \
    --junitxml "$OUT/junit.xml" ${SUITE_ARGS:-} >> "$OUT/suite.log" 2>&1
echo "suite exit $?" | tee -a "$OUT/suite.log"
if [ -n "${STUDENT_PID:-}" ]; then
    wait "$STUDENT_PID"
    echo "student editions exit $?" | tee -a "$OUT/student.log"
    grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/student.log" | tail -20
fi
grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/suite.log" | tail -40
