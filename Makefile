# The project's front door: `make demo` and `make test` work on a fresh machine with only Python.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
CONSTRAINTS := constraints/dev.txt
TORCH_VERSION := 2.13.0
GRPC_TOOLS_VERSION := 1.81.1
CERTS := certs
DATA := examples/data

.PHONY: help venv wheelhouse certs data demo test test-unit test-integration lint typecheck proto proto-check docs bench-overhead bench-psi bench-psi-10m bench-data bench-train-10m bench-score bench-comm bench-oracles bench-fedbcd bench-async bench-apfed bench-distill bench-adptvfedconv bench-inference bench-wan bench-service bench-recovery bench-privacy bench-fuzz fuzz clean

help:
	@echo "make demo            set up, then run server + 2 clients over mTLS: training and inference"
	@echo "make test            set up, then lint, typecheck, proto drift check, the docs and the whole suite"
	@echo "make docs            build the documentation site (mkdocs.yml) in strict mode: a broken link fails"
	@echo "make proto           regenerate the committed gRPC code from proto/"
	@echo "make wheelhouse      the wheel, CPU torch and every dependency in wheelhouse/, for hosts with no package index"
	@echo "make bench-overhead  federation overhead ratio (SplitNN over mTLS vs in-process)"
	@echo "make bench-comm      bytes to 95 % accuracy: VIMADMM vs VIMSGD vs SplitNN (digits, 4 clients)"
	@echo "make bench-oracles   every row of shared/ORACLES.md §1 over mTLS, 3 seeds, against the authors' figures (about 25 min)"
	@echo "make bench-fedbcd    rounds to 93 % accuracy: FedBCD Q=10 vs Q=1 (digits)"
	@echo "make bench-async     wall time, async vs sync VFL, round-robin delayed parties"
	@echo "make bench-apfed     APFed Table 2 on digits: APFed-R/-C vs SingleVL and TVFL, plus the λ sweep (10-15 min)"
	@echo "make bench-distill   distilled active-party student vs SingleVL, APFed and the teacher: digits, breast cancer, diabetes (2-3 min)"
	@echo "make bench-adptvfedconv AdptVFedConv Table 2 on digits: 4 quadrant parties vs centralised, ablations (3-7 min)"
	@echo "make bench-wan       SplitNN/FedBCD/VIM/async x fp32/bf16/int8 over two emulated WAN links: time to 98 % vs in-process (15-25 min)"
	@echo "make bench-inference KServe v2 endpoint: 8 callers at batch 1, 30 s gRPC + 30 s REST, p50/p99 and req/s"
	@echo "make bench-service   30 one-epoch SplitNN jobs on one long-running server + 2 daemons: RSS, fds, threads, latency"
	@echo "make bench-recovery  SplitNN, 20 epochs, party 3 killed 3 times: loss difference and restart-to-training time"
	@echo "make bench-privacy   attack probes x every algorithm x its defences over mTLS, 2 tasks, 3 seeds a cell: strongest attack vs cost (~2 h)"
	@echo "make fuzz            the fuzz campaign as a test, FUZZ_CASES=$(FUZZ_CASES) cases at every surface while jobs train"
	@echo "make bench-fuzz      100,000 fuzz cases over every input surface of a live service: per target and surface, failures"
	@echo "make bench-psi       PSI 1M x 1M: vfl-server --psi-only + vfl-client over mTLS (several minutes)"
	@echo "make bench-score     vfl-score on 10M rows: the local loop against Ray Data on this machine, same files (needs .[ray])"
	@echo "make bench-psi-10m   PSI 10M x 10M, 80 % shared: time against the floor, peak RSS per party, 1M next to openmined.psi (tens of minutes)"
	@echo "make bench-data      reading 1M and 10M x 30 tables (CSV, Parquet): the project's reader vs pyarrow, time and peak RSS"
	@echo "make bench-train-10m SplitNN on 10M aligned rows, batch 4096, server + 2 daemons over mTLS: s/epoch, peak RSS per party"

venv: $(STAMP)

# torch goes first, pinned to the local CPU wheel: a bare torch requirement would pull CUDA builds.
# The dev tools (hypothesis, pytest, ruff, mypy, ...) come at the exact versions in $(CONSTRAINTS),
# so that every fresh clone draws the same fuzz cases and lints the same way (issue 41).
$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet torch==$(TORCH_VERSION)
	$(PIP) install --quiet -c $(CONSTRAINTS) -e '.[dev,ray]'
	touch $(STAMP)

# The offline install (docs/operations.md, "Installing on a host"): every wheel a host needs, so that
# `pip install --no-index --find-links wheelhouse vfl-service` installs with no package index. torch
# is the one `make venv` installs (TORCH_INDEX: pip options for an index with CPU wheels, where the
# package index serves CUDA builds); the last line checks that nothing is missing.
WHEELHOUSE := wheelhouse
TORCH_INDEX ?=
wheelhouse: venv
	rm -rf $(WHEELHOUSE)
	$(PIP) download --quiet --no-deps --dest $(WHEELHOUSE) torch==$(TORCH_VERSION) $(TORCH_INDEX)
	$(PIP) wheel --quiet --no-deps --wheel-dir $(WHEELHOUSE) .
	$(PIP) wheel --quiet --wheel-dir $(WHEELHOUSE) --find-links $(WHEELHOUSE) torch==$(TORCH_VERSION) \
	  $$(ls $(WHEELHOUSE)/vfl_service-*.whl)
	$(PIP) install --quiet --dry-run --ignore-installed --no-index --find-links $(WHEELHOUSE) vfl-service
	@echo "$(WHEELHOUSE)/: $$(ls $(WHEELHOUSE) | wc -l) wheels, $$(du -sh $(WHEELHOUSE) | cut -f1)"

$(CERTS)/ca.pem: | $(STAMP)
	$(VENV)/bin/vfl-certs init --out $(CERTS) --parties 2 3

certs: $(CERTS)/ca.pem

$(DATA)/party1.csv: examples/make_digits_data.py vfltesting/datasets.py | $(STAMP)
	PYTHONPATH=$(CURDIR) $(PY) examples/make_digits_data.py --out $(DATA)

data: $(DATA)/party1.csv

demo: venv certs data
	PYTHONPATH=$(CURDIR) $(PY) examples/run_demo.py --certs $(CERTS) --data $(DATA)

# Bytecode caches on for the suite, whatever the shell says: it starts well over a hundred Python
# processes that import the project (daemons, launchers, scripts), and with PYTHONDONTWRITEBYTECODE
# set (the shell of the 2-core machine this was measured on sets it) each compiled the project's
# modules again, about 0.5 CPU-s apiece, and every run redid pytest's assertion rewriting of every
# test file, about 11 CPU-s per xdist worker (2026-11-29). compileall writes the project's caches
# once, before the workers start.
PRECOMPILED := vflcore vflserver vflclient vflalgorithms vflprivacy vfltesting bench examples
test test-unit test-integration: export PYTHONDONTWRITEBYTECODE :=

test: venv lint typecheck proto-check docs
	$(PY) -m compileall -q $(PRECOMPILED)
	$(PY) -m pytest -q

# One process: the unit tests take ~20-30 s, and starting xdist's workers costs more than they save.
test-unit: venv
	$(PY) -m pytest -q -n 0 tests/unit

test-integration: venv
	$(PY) -m pytest -q tests/integration

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: venv
	$(VENV)/bin/mypy

# The site goes to build/site (ignored). --strict: a broken link or anchor, or a page missing
# from mkdocs.yml's nav, fails the build, and with it `make test`. Not --quiet: it hides the
# warnings, and --strict then has none to fail on.
docs: venv
	$(VENV)/bin/mkdocs build --strict --site-dir build/site

# One generator, pinned: the committed code must be exactly what this produces.
proto: venv
	$(PY) -c "import grpc_tools; from importlib.metadata import version as v; \
	  assert v('grpcio-tools') == '$(GRPC_TOOLS_VERSION)', 'grpcio-tools must be $(GRPC_TOOLS_VERSION), found ' + v('grpcio-tools')"
	$(PY) -m grpc_tools.protoc -I proto --python_out=. --pyi_out=. --grpc_python_out=. \
	  proto/vflcore/proto/federation.proto
	# No gRPC stubs for the inference service: they would carry this file's package in their
	# method paths, but the service answers under KServe's `inference.GRPCInferenceService`.
	$(PY) -m grpc_tools.protoc -I proto --python_out=. --pyi_out=. \
	  proto/vflcore/proto/open_inference.proto

proto-check: proto
	@git diff --exit-code -- vflcore/proto || { echo "generated code in vflcore/proto is stale: run 'make proto' and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- vflcore/proto)" || { echo "untracked generated files in vflcore/proto: run 'make proto' and commit"; git status --porcelain -- vflcore/proto; exit 1; }

bench-overhead: venv certs
	$(PY) -m bench.operations.overhead

bench-psi: venv
	$(PY) -m bench.psi

bench-psi-10m: venv
	$(PY) -m bench.psi.psi_10m
bench-data: venv
	$(PY) -m bench.scale.data

bench-train-10m: venv
	$(PY) -m bench.scale.train_10m

bench-comm: venv
	$(PY) -m bench.algorithms.comm

bench-oracles: venv
	$(PY) -m bench.algorithms.oracles

bench-fedbcd: venv
	$(PY) -m bench.algorithms.fedbcd

bench-async: venv
	$(PY) -m bench.algorithms.asynchronous

bench-apfed: venv
	$(PY) -m bench.algorithms.apfed

bench-distill: venv
	$(PY) -m bench.algorithms.distill

bench-adptvfedconv: venv
	$(PY) -m bench.algorithms.adptvfedconv

bench-inference: venv
	$(PY) -m bench.operations.inference

bench-wan: venv
	$(PY) -m bench.operations.wan

FUZZ_CASES ?= 3000

fuzz: venv
	FUZZ_CASES=$(FUZZ_CASES) $(PY) -m pytest -q tests/integration/security/test_fuzz.py

bench-fuzz: venv
	$(PY) -m bench.operations.fuzz

bench-service: venv
	$(PY) -m bench.operations.service

bench-recovery: venv
	$(PY) -m bench.operations.recovery

bench-privacy: venv
	$(PY) -m bench.privacy

bench-score: venv
	$(PY) -m bench.scale.scoring

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache .ruff_cache
