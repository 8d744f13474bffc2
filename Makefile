# stream-dedupe: every target installs what it needs into .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

## demo: dedupe the bundled example crawl into demo-out/ (events, canonical documents, clusters)
demo: $(STAMP)
	rm -rf demo-out && mkdir -p demo-out
	$(BIN)/stream-dedupe dedupe examples/crawl-sample.jsonl --state demo-out/state \
	    --events demo-out/events.jsonl --deduped demo-out/deduped.jsonl
	$(BIN)/stream-dedupe clusters --state demo-out/state -o demo-out/clusters.jsonl
	@echo "wrote demo-out/events.jsonl, demo-out/deduped.jsonl, demo-out/clusters.jsonl"

## test: lint, type-check and run the whole test suite
test: $(STAMP) lint
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

## bench: embedded engine beside datasketch on the same documents (see BENCHMARKS.md)
bench: $(STAMP)
	$(BIN)/python bench/bench_embedded.py --docs 20000

clean:
	rm -rf $(VENV) demo-out bench/out
