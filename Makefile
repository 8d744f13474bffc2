# stream-dedupe: every target installs what it needs into .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# the development and test tools (pytest, ruff, mypy, ...) on top: not for `make demo`
DEV    := $(VENV)/.installed-dev
# compiled kernels: built again when a kernel's source changes (the ahead-of-time module is keyed by it)
KERNELS := $(VENV)/.kernels
KERNEL_SOURCES := $(addprefix stream_dedupe/core/,kernels.py lsh.py bandindex.py lineform.py linekeys.py verify.py)

.PHONY: bytecode demo test lint bench bench-peers bench-worker bench-scale bench-scale-out tools clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e . -c constraints.txt  # locked versions: tools/update-constraints.sh
	touch $(STAMP)

$(DEV): $(STAMP)
	$(BIN)/pip install -q -e '.[dev]' -c constraints.txt
	touch $(DEV)

$(KERNELS): $(STAMP) $(KERNEL_SOURCES)
	$(BIN)/python -m stream_dedupe.warmup  # numba kernels into their cache, then the ahead-of-time module (core/aot.py)
	touch $(KERNELS)

# The package's bytecode, as a non-editable install has it: with PYTHONDONTWRITEBYTECODE set (CI
# images, containers) an editable checkout would otherwise compile every module in every process,
# ~0.1 s of each command's start-up (BENCHMARKS.md, "Start-up"). Incremental: only changed modules.
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q stream_dedupe

## demo: dedupe the bundled example crawl into demo-out/ (events, canonical documents, clusters)
demo: $(KERNELS) bytecode
	rm -rf demo-out && mkdir -p demo-out
	$(BIN)/stream-dedupe dedupe examples/crawl-sample.jsonl --state demo-out/state \
	    --events demo-out/events.jsonl --deduped demo-out/deduped.jsonl
	$(BIN)/stream-dedupe clusters --state demo-out/state -o demo-out/clusters.jsonl
	@echo "wrote demo-out/events.jsonl, demo-out/deduped.jsonl, demo-out/clusters.jsonl"

## tools: what the tests drive for real (Debian packages: headless Chromium, Prometheus, openssl, podman/buildah/debootstrap; helm built with Go)
tools:
	@missing=""; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v promtool >/dev/null 2>&1 || missing="$$missing prometheus"; \
	command -v openssl >/dev/null 2>&1 || missing="$$missing openssl"; \
	command -v buildah >/dev/null 2>&1 || missing="$$missing buildah"; \
	command -v podman >/dev/null 2>&1 || missing="$$missing podman"; \
	command -v debootstrap >/dev/null 2>&1 || missing="$$missing debootstrap"; \
	if [ -n "$$missing" ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	@bash tools/helm/install.sh >/dev/null  # helm, built once with Go into ~/.cache/stream-dedupe/helm

## test: lint, type-check and run the whole test suite
test: $(DEV) $(KERNELS) bytecode tools lint
	$(BIN)/python -m pytest -q

lint: $(DEV)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .  # code and the README's and docs' Python examples
	$(BIN)/mypy

## bench: embedded engine beside datasketch on the same documents (see BENCHMARKS.md)
bench: $(DEV) $(KERNELS) bytecode
	$(BIN)/python bench/bench_embedded.py --docs 20000

## bench-peers: stream-dedupe beside rensa, datasketch and datatrove (its own venv), fresh processes, interleaved rounds (BENCHMARKS.md)
DATATROVE_VENV := bench/out/datatrove-venv
#: A real corpus (mail and forum text) for a second run, when the shared data is beside the repo.
NEWSGROUPS ?= ../shared/data/20newsgroups_bydate.jsonl.gz
bench-peers: $(DEV) $(KERNELS) bytecode
	$(BIN)/pip install -q -e '.[bench]'
	@test -x $(DATATROVE_VENV)/bin/python || { $(PYTHON) -m venv $(DATATROVE_VENV) && \
	    $(DATATROVE_VENV)/bin/pip install -q 'datatrove==0.10.1' regex tokenizers 'xxhash<4' nltk orjson spacy; } || \
	    { echo "datatrove did not install: it is left out"; rm -rf $(DATATROVE_VENV); }
	$(BIN)/python bench/bench_peers.py --docs 20000 --rounds 3 --json bench/out/peers.json \
	    $$(test -x $(DATATROVE_VENV)/bin/python && echo --datatrove-python $(DATATROVE_VENV)/bin/python)
	@test ! -f $(NEWSGROUPS) || $(BIN)/python bench/bench_peers.py --rounds 3 --corpus $(NEWSGROUPS) \
	    --json bench/out/peers-newsgroups.json

## bench-worker: end to end through a real broker, beside the embedded engine (starts its own broker)
bench-worker: $(DEV) $(KERNELS) bytecode
	$(BIN)/python bench/bench_worker.py --docs 20000

## bench-scale-out: decide stage ceiling in isolation; 1 vs 2 workers; takeover after kill -9 (~20 min)
bench-scale-out: $(DEV) $(KERNELS) bytecode
	$(BIN)/python bench/bench_index.py --docs 20000 --rounds 3 --json bench/out/index.json
	$(BIN)/python bench/bench_scale_out.py --docs 20000 --failover-docs 100000 --rounds 2 --standby-settle 30

## bench-scale: cost from 10k to 1M documents, engine beside datasketch (~15 min, ~5 GB in /tmp/sd-bench-scale; BENCHMARKS.md)
bench-scale: $(DEV) $(KERNELS) bytecode
	$(BIN)/python bench/bench_scale.py --sizes 10000,100000,1000000 --repeat-pair

clean:
	rm -rf $(VENV) demo-out bench/out
