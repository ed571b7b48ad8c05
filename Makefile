# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv and install
# txkafka with its test extras first; Kafka jars come from Maven Central on first use.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: install demo test unit bench soak broker dist clean

$(STAMP): pyproject.toml .ci/editable_toplevel.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,bench]'
	$(BIN)/python .ci/editable_toplevel.py
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/txkafka demo

test: $(STAMP)
	$(BIN)/python .ci/pytest_gate.py $(PYTEST_ARGS)

unit: $(STAMP)
	$(BIN)/python -m pytest -q tests

bench: $(STAMP)
	$(BIN)/python -m txkafka.devtools bench

# The release files: dist/txkafka-<version>.tar.gz (sdist) and the wheel built from it.
dist: $(STAMP)
	$(BIN)/python -m build --outdir dist .

broker: $(STAMP)
	$(BIN)/txkafka broker start

clean:
	-$(BIN)/txkafka broker stop --clean
	rm -rf $(VENV) results dist build
