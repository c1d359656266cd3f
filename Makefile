# The two commands: `make lab` (JupyterLab on the lessons) and `make test` (the suite but its slow tests;
# `make test-all` runs them too).
# Both build .venv from nothing on first use (tools/setup-venv.sh) and reuse it afterwards.
VENV ?= .venv
PY ?= $(VENV)/bin/python
# `make lab` serves a working copy of the lessons, never notebooks/ itself: the student edition by
# default, EDITION=instructor for the lessons as committed (solutions in). The copy lives in LAB_DIR
# (git-ignored work/<edition>/) and is kept between runs: only lessons missing there are written,
# so a learner's work is never overwritten (delete a notebook there to get it fresh).
EDITION ?= student
LAB_DIR ?= work/$(EDITION)
PYTEST_ARGS ?=
# extra arguments for JupyterLab, e.g. make lab ARGS="--no-browser --port 8890"
ARGS ?=
# JupyterLab refuses to run as root without --allow-root (containers, cloud VMs): add it there
ROOT_FLAG := $(if $(filter 0,$(shell id -u 2>/dev/null)),--allow-root,)

.PHONY: venv test test-slow test-all lab lab-folder info check bench inspect notebooks sanitize \
	clean site hub room-test student wheel

venv:
	@VENV=$(VENV) tools/setup-venv.sh

# strict nbval: every cell's output is compared with the committed one, but for cells tagged
# nbval-ignore-output (tools/tag_notebooks.py) and the numbers nbval_sanitize.cfg normalises.
# `make test` leaves out the tests marked slow (end to end: the wheel in a fresh venv, the browser, the
# hub, the student edition under nbval, the site; tests/conftest.py lists those marked by path);
# `make test-slow` runs only them, `make test-all` everything. In parallel where pytest-xdist is
# installed, JOBS workers (at most 8 by default); a file's tests stay on one worker (a notebook's cells
# share one kernel). JOBS=0 runs in this process.
JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -gt 8 ] && n=8; echo $$n)
XDIST = $(shell $(PY) -c 'import xdist' 2>/dev/null && echo "-n $(JOBS) --dist loadfile")
NBVAL = --nbval --nbval-current-env --nbval-sanitize-with nbval_sanitize.cfg
test: venv
	$(PY) -m pytest $(XDIST) -m "not slow" --nbval --nbval-current-env --nbval-sanitize-with nbval_sanitize.cfg \
		tests notebooks $(PYTEST_ARGS)

test-slow: venv
	$(PY) -m pytest $(XDIST) -m slow $(NBVAL) tests notebooks $(PYTEST_ARGS)

test-all: venv
	$(PY) -m pytest $(XDIST) $(NBVAL) tests notebooks $(PYTEST_ARGS)

# the server prints its URL with the token (http://127.0.0.1:8888/lab?token=...) on the terminal
lab: lab-folder
	$(PY) -m jupyterlab $(ROOT_FLAG) $(ARGS) "$(LAB_DIR)"

# LAB_DIR's lessons, written where missing (what `make lab` serves)
lab-folder: venv
	@case "$(EDITION)" in student) flag= ;; instructor) flag=--instructor ;; \
	  *) echo "make lab: EDITION=$(EDITION): use EDITION=student (default) or instructor" >&2; \
	     exit 2 ;; esac; \
	$(PY) -m rmsnorm_lessons student $$flag "$(LAB_DIR)" notebooks

# the learner's edition, committed in student/ (what the README's and the site's Colab and Binder links
# open), written again from notebooks/: run it after changing a lesson (tests/test_student_folder.py
# fails while the two differ)
student: venv
	rm -f student/*.ipynb
	$(PY) -m rmsnorm_lessons student --overwrite student notebooks

# the wheel (the package, its kernels and its lessons) in dist/: pip installs it anywhere
wheel: venv
	$(PY) -m pip wheel --no-deps -w dist .

info: venv
	$(PY) -m rmsnorm_lessons info

check: venv
	$(PY) -m rmsnorm_lessons check

bench: venv
	$(PY) -m rmsnorm_lessons bench --json bench.json

# Re-execute every lesson in place (on a GPU machine, to refresh the committed outputs).
notebooks: venv
	$(PY) -m rmsnorm_lessons.course.execute notebooks/*.ipynb

# compute-sanitizer (memcheck, racecheck, synccheck, initcheck) over every version at two shapes (GPU).
# e.g. make sanitize SANITIZE_ARGS="--logs out/sanitize --versions v6_last_block"
sanitize: venv
	$(PY) tools/sanitize.py $(SANITIZE_ARGS)

# the course as a static website in build/site/student (SITE_ARGS=--instructor: build/site/instructor,
# solutions in): every lesson with its saved outputs, the kernels' sources, the workshop pages
# (tools/build_site.py says how and why); open build/site/student/index.html
SITE_ARGS ?=
site: venv
	$(PY) tools/build_site.py $(SITE_ARGS)

# the workshop hub (hub/README.md), as root: JupyterHub for a room of learners on this machine; prints
# its URL. e.g. make hub HUB_ARGS="--learners 20 --ip 0.0.0.0 --host hub.example.org"
# It needs no .venv: hub/run.py is standard library, and it builds the one environment the hub and
# the learners run from (build/hub/env, hub/learner-env.sh).
HUB_ARGS ?=
HUB_PY ?= python3
hub:
	$(HUB_PY) hub/run.py $(HUB_ARGS)

# a room of N learners on this machine, end to end (hub/room_test.py): each logs in over TLS, opens
# lesson 01 on their own origin and runs a check; then everything it made is removed
N ?= 30
ROOM_ARGS ?=
room-test:
	$(HUB_PY) hub/room_test.py --learners $(N) $(ROOM_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache
