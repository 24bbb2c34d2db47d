# Two commands: `make demo` runs the main job, `make test` runs the checks.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[torch,data,dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m jaxdl train --model cnn --data digits --epochs 5 --compare-torch --out runs/demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .

test: lint
	$(PY) -m pytest -n 2

clean:
	rm -rf $(VENV) runs .pytest_cache
