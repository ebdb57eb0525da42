# attnserve — one place for the commands a developer and CI run.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_VERSION ?= 2.13.0

.PHONY: install install-bench run test lint format typecheck bench-attention clean

# Creates the virtual environment. torch is installed on its own first: the project's
# range admits 2.13.0, so the later install resolves nothing new (no CUDA wheels here).
$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip setuptools wheel

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install "torch==$(TORCH_VERSION)"
	$(BIN)/pip install -e ".[dev]"
	touch $@

install: $(VENV)/.installed

$(VENV)/.installed-bench: $(VENV)/.installed
	$(BIN)/pip install -e ".[dev,bench]"
	touch $@

install-bench: $(VENV)/.installed-bench

run: install
	$(BIN)/attnserve serve

# pytest exits 5 when it collects no test at all; that alone must not fail CI.
test: install
	$(BIN)/python -m pytest -q || [ $$? -eq 5 ]

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: install
	$(BIN)/mypy

bench-attention: install-bench
	$(BIN)/python -m benchmarks.attention

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
