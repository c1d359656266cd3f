# The two commands: `make lab` (JupyterLab on the lessons) and `make test` (the whole suite).
# Both build .venv from nothing on first use (tools/setup-venv.sh) and reuse it afterwards.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: venv test lab info check bench inspect notebooks sanitize clean

venv:
	@VENV=$(VENV) tools/setup-venv.sh

test: venv
	$(PY) -m pytest --nbval-lax --nbval-current-env tests notebooks $(PYTEST_ARGS)

lab: venv
	$(VENV)/bin/jupyter lab notebooks

info: venv
	$(PY) -m rmsnorm_lessons info

check: venv
	$(PY) -m rmsnorm_lessons check

bench: venv
	$(PY) -m rmsnorm_lessons bench --json bench.json

# Re-execute every lesson in place (on a GPU machine, to refresh the committed outputs).
notebooks: venv
	$(PY) -m rmsnorm_lessons.execute notebooks/*.ipynb

# compute-sanitizer (memcheck, racecheck, synccheck, initcheck) over every version at two shapes (GPU).
# e.g. make sanitize SANITIZE_ARGS="--logs out/sanitize --versions v6_last_block"
sanitize: venv
	$(PY) tools/sanitize.py $(SANITIZE_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache
