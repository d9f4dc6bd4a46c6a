# Two commands for a fresh machine: `make demo` and `make test`. Both create .venv and install everything first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.edge0-installed
DEMO   := build/demo/qwen3_moe
UNAME  := $(shell uname -s)

.PHONY: setup test demo docs docs-html export

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
ifeq ($(UNAME),Linux)
	# the CPU wheel; a plain `torch` requirement would pull a multi-GB CUDA build
	$(BIN)/python -m pip install -q torch==2.13.0
endif
	$(BIN)/python -m pip install -q -e ".[dev,torch]"
	touch $(STAMP)

test: setup
	$(BIN)/nbdev_test --n_workers 2
	$(BIN)/python -m pytest -q tests

demo: setup
	@test -f $(DEMO)/config.json || $(BIN)/edge0 zoo qwen3_moe $(DEMO) --overwrite
	$(BIN)/edge0 spec $(DEMO)
	$(BIN)/edge0 generate --model $(DEMO) --prompt "Once upon a time" --max-tokens 48 --stats

export: setup
	$(BIN)/nbdev_export
	$(BIN)/nbdev_clean
	$(BIN)/python tools/render_docs.py --readme

docs: setup
	@command -v quarto >/dev/null || { echo "nbdev_docs needs quarto (https://quarto.org); use 'make docs-html' for an offline rendering"; exit 2; }
	$(BIN)/nbdev_docs

docs-html: setup
	$(BIN)/python tools/render_docs.py --out html
	@echo "open html/index.html"
