# Two commands for a fresh machine: `make demo` and `make test`. Both create .venv and install everything first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.edge0-installed
UNAME  := $(shell uname -s)

.PHONY: setup chromium test demo docs docs-html export teachers prerouters adapters ladder bench probes

setup: $(STAMP)

# --no-cache-dir: a fresh machine's disk holds one copy of each wheel (torch's is large), not a second in pip's cache
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --no-cache-dir --upgrade pip
ifeq ($(UNAME),Linux)
	# the CPU wheel; a plain `torch` requirement would pull a multi-GB CUDA build
	$(BIN)/python -m pip install -q --no-cache-dir torch==2.13.0
endif
	$(BIN)/python -m pip install -q --no-cache-dir -e ".[dev,torch]"
	touch $(STAMP)

# The docs' browser test needs chromium: installed here as root on Debian; elsewhere the test skips (fails with CI set).
chromium:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then apt-get update -qq && apt-get install -y -qq chromium; \
	  else echo "no chromium and not root on Debian: the docs browser test will skip (install chromium to run it)"; fi

# pytest with two workers: most tests are one process each (a CLI run, a child), so two halve the wall time on two cores
test: setup chromium
	$(BIN)/nbdev_test --n_workers 2
	$(BIN)/python -m pytest -q -n 2 tests

# the code teacher completes a Python function, its experts streamed and predicted one token ahead, each layer's own two
# heaviest always computed; no recovery LoRA (none is trained at exact top-2: a note says so) (the prose teacher:
# edge0 generate -m edge0-tiny -p "The history of the city" --ignore-chat-template --mode routing --k 4)
demo: setup
	$(BIN)/edge0 spec edge0-tiny-code
	printf 'import os\n\n\ndef ' | $(BIN)/edge0 generate -m edge0-tiny-code -p - --ignore-chat-template --max-tokens 48 --mode routing --exact-top 2 --repetition-penalty 1.2 --stats
	@echo "The counters: each step the prerouter heads predicted the next token's experts for the planned layers and they were read in the background ('background loads') while the step ran; 'planned experts computed' of all and '0 dropped' mean no predicted expert was skipped; the table counts each layer's experts read from disk and served from the pool."

# Reproduce the committed tiny teachers from ../shared/data/corpus (the prose ones about 40 min on 2 cores, the code teacher
# about 70 min in torch; each resumes where it stopped). The mlx[cpu] wheel links the reference BLAS; Debian's OpenBLAS,
# when installed, is preloaded (5x faster MLX training; recorded in the provenance).
OPENBLAS := $(wildcard /usr/lib/x86_64-linux-gnu/libopenblas.so.0 /usr/lib/aarch64-linux-gnu/libopenblas.so.0)
teachers: setup
	for t in edge0-tiny edge0-tiny-ds edge0-tiny-code; do $(if $(OPENBLAS),LD_PRELOAD=$(firstword $(OPENBLAS))) $(BIN)/edge0 train $$t --dst build/teachers/out || exit 1; done
	@echo "compare build/teachers/out with edge0/models, then copy it there to update the committed teachers"

# Phase 1: the prerouter heads of edge0-tiny and edge0-tiny-code at K=8 and K=4 (10-20 min each) and of edge0-tiny-ds and
# edge0-tiny-q35 at K=4 and K=2 (2-6 min each), beside a copy of the committed base (`edge0 train MODEL --phase heads` does the same for any model).
prerouters: setup
	for tk in edge0-tiny:8 edge0-tiny:4 edge0-tiny-ds:4 edge0-tiny-ds:2 edge0-tiny-q35:4 edge0-tiny-q35:2 edge0-tiny-code:8 edge0-tiny-code:4; do $(if $(OPENBLAS),LD_PRELOAD=$(firstword $(OPENBLAS))) $(BIN)/edge0 train $${tk%:*} --phase heads --k $${tk#*:} --dst build/teachers/out || exit 1; done
	@echo "compare build/teachers/out/*-int4/prerouter*.safetensors with edge0/models/*-int4, then copy them there"

# Phases 2 and 3: the recovery LoRA of edge0-tiny-code at K=8 and K=4 (about 45 min each with OpenBLAS), of edge0-tiny
# at K=8 and K=4 (about 20 min each), of edge0-tiny-ds at its native K=4 and narrowed to K=2 (about 10 min each) and of
# edge0-tiny-q35 at K=4 and K=2 (about 27 min each),
# beside a copy of the committed base and heads; then edge0-tiny-code's adapters trained on the exact top-1 path
# (lora-k{K}-top1). `make ladder` then measures all of them but edge0-tiny-q35's (a teacher without stage files in
# build/teachers is measured with its committed phase-3 adapter); `bench/quality_ladder.py --runs edge0-tiny-q35:4
# edge0-tiny-q35:2 --windows 8 --out bench/results/quality_ladder_q35` measures those.
ADAPTERS := edge0-tiny-code:8 edge0-tiny-code:4 edge0-tiny:8 edge0-tiny:4 edge0-tiny-ds:4 edge0-tiny-ds:2 edge0-tiny-q35:4 \
	edge0-tiny-q35:2
EXACT_ADAPTERS := edge0-tiny-code:8 edge0-tiny-code:4
adapters: setup
	for tk in $(ADAPTERS); do for phase in 2 3; do $(if $(OPENBLAS),LD_PRELOAD=$(firstword $(OPENBLAS))) $(BIN)/edge0 train $${tk%:*} --phase $$phase --k $${tk#*:} --dst build/teachers/out || exit 1; done; done
	for tk in $(EXACT_ADAPTERS); do for phase in 2 3; do $(if $(OPENBLAS),LD_PRELOAD=$(firstword $(OPENBLAS))) $(BIN)/edge0 train $${tk%:*} --phase $$phase --k $${tk#*:} --exact-top 1 --dst build/teachers/out || exit 1; done; done
	@echo "compare build/teachers/out/*-int4/lora-k*.safetensors with edge0/models, then copy them there; 'make ladder' measures them"

ladder: setup
	$(if $(OPENBLAS),LD_PRELOAD=$(firstword $(OPENBLAS))) $(BIN)/python bench/quality_ladder.py

# The benchmarks, each through the harness (edge0.harness): streaming memory, the prerouter A/B, the prerouter across
# storage tiers, and the planner's predictions against the harness (needs root for the cgroups; about 90 min); each
# prints its tables.
bench: setup
	$(BIN)/python bench/streaming_memory.py
	$(BIN)/python bench/prerouter_ab.py
	$(BIN)/python bench/tiers.py
	$(BIN)/python bench/plan_calibration.py

# The pre-attention probes of edge0-tiny and edge0-tiny-ds, trained on ../shared/data/corpus (about 10 min with OpenBLAS)
probes: setup
	$(BIN)/python bench/probes.py

export: setup
	$(BIN)/nbdev_export
	$(BIN)/nbdev_clean
	$(BIN)/python tools/render_docs.py --shrink
	$(BIN)/python tools/render_docs.py --readme

# nbdev_docs renders with quarto; without it, `make docs-html` renders the same pages offline into html/ (screenshots of
# a few pages in html/screenshots/ when chromium is here)
docs: setup
	@command -v quarto >/dev/null || { echo "nbdev_docs needs quarto (https://quarto.org), not found: 'make docs-html' renders the site offline into html/"; exit 2; }
	$(BIN)/nbdev_docs

docs-html: setup
	$(BIN)/python tools/render_docs.py --out html --screenshots
	@echo "open html/index.html"
