# Two commands matter: `make demo` (sets up if needed, runs a local P2P fleet and the cross-node proof)
# and `make test`. Everything installs into ./.venv.
SHELL := /bin/bash
VENV ?= .venv
# vLLM lives in a venv of its own (scripts/setup_vllm.sh says why); the lmcache servers stay in $(VENV).
VLLM_VENV ?= .venv-vllm
# vllm-router (a Rust binary from PyPI) gets a small venv of its own too: its pins never move ours.
ROUTER_VENV ?= .venv-router
# inference-perf (kubernetes-sigs' load generator, Python >= 3.12) likewise: `test stress --generator inference-perf`.
INFERENCE_PERF_VENV ?= .venv-inference-perf
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.p2p-setup-done
export LMCACHE_TRACK_USAGE := false
export DO_NOT_TRACK := 1
export LMCACHE_DISABLE_BANNER := 1
export PYTHONWARNINGS := ignore

.PHONY: setup setup-vllm setup-router setup-inference-perf test-inference-perf setup-mooncake demo demo-vllm test test-fast test-vllm test-hostile test-explain test-diagnosis test-diagnosis-ci lint clean bench bench-quick bench-ci bench-peers

setup: $(STAMP)

# torch first so the CPU build satisfies lmcache's unpinned torch; then nixl-cu12 and the nixl meta
# package without deps (plain `nixl` would pull a second CUDA variant); then the project with the node runtime
# (`[node]`: the embedded engine, lmcache, nixl-cu12). The `$(PIP)` lines are also what `p2pctl probe
# --bootstrap` runs on nodes; the last line adds what only this checkout needs: charts and the test tools.
$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q nixl-cu12==1.5.1
	$(PIP) install -q --no-deps nixl==1.5.1
	$(PIP) install -q -e '.[node]'
	$(PY) -m pip install -q -e '.[node,plots,dev]'
	touch $(STAMP)

# Mooncake's transfer engine for fleets on settings.transfer_engine: mooncake_te: the build matching this host
# (non-CUDA without GPUs), checked to import and uninstalled again if it does not (a Mooncake that does not import
# stops every lmcache server, nixl ones too). The wheels and the pin live in p2p_ops/facts/python_env.py; `p2pctl
# probe --bootstrap` runs the same script on nodes. Not a `$(PIP) install` line: bootstrap replays those on every
# node, and nixl fleets do not need it. Needs Debian libibverbs1 libnuma1 libcurl4 (scripts/test_deps.sh).
setup-mooncake: setup
	set -o pipefail; $(PY) -m p2p_ops.lifecycle.preflight.bootstrap $(VENV) | bash

# vLLM's venv needs nothing of .venv: CI installs it beside `make setup`.
setup-vllm:
	bash scripts/setup_vllm.sh $(VLLM_VENV)

setup-router:
	bash scripts/setup_router.sh $(ROUTER_VENV)

setup-inference-perf:
	bash scripts/setup_inference_perf.sh $(INFERENCE_PERF_VENV)

demo: setup
	$(PY) -m p2p_ops.cli.demo

# The demo on real vLLM (CPU build): makes the tiny local model if needed.
demo-vllm: setup setup-vllm
	P2P_VLLM_VENV=$(VLLM_VENV) $(PY) -m p2p_ops.cli.demo --runtime vllm

# Every tier, the real-vLLM and Mooncake ones included (their environments are set up first; Mooncake after the
# Debian packages its import needs). The unit tier runs on two workers, a test file each (pure code and fake
# connectors, CPU-bound); the tiers with real fleets run one test at a time, as their timings assume.
test: setup setup-vllm setup-router
	scripts/test_deps.sh
	$(MAKE) setup-mooncake
	$(PY) -m pytest -q -rs -n 2 --dist loadfile --durations=10 tests/unit
	P2P_VLLM_VENV=$(VLLM_VENV) P2P_ROUTER_VENV=$(ROUTER_VENV) $(PY) -m pytest -q -rs --durations=15 \
		tests/component tests/e2e tests/multinode tests/router tests/vllm

test-vllm: setup setup-vllm
	P2P_VLLM_VENV=$(VLLM_VENV) $(PY) -m pytest -q -rs -m vllm

# inference-perf's tier (~800 MB in its own venv, a few minutes to set up; the run ~5 min): opt-in, not in `test`.
# Its config and output parsers are unit-tested in `test` from captured output.
test-inference-perf: setup setup-inference-perf
	P2P_INFERENCE_PERF_VENV=$(INFERENCE_PERF_VENV) P2P_REQUIRE_INFERENCE_PERF=1 $(PY) -m pytest -q -rs \
		tests/e2e/test_stress_inference_perf.py tests/unit/test_inference_perf.py

# explain's planted causes that restart servers or fill an L1 (~10 min on a 2-core box): opt-in, not in `test`.
test-explain: setup
	P2P_EXPLAIN_E2E=1 $(PY) -m pytest -q -rs -s tests/e2e/test_explain.py

# The diagnosis benchmark (bench/diagnosis.py): 22 planted causes on one local fleet, every verb that judges
# each, top-1 accuracy per verb, contradictions and confident wrong answers (~30 min on a 2-core box); it exits 1
# on a wrong answer, a contradiction or an abstention its case does not allow. Opt-in; its quick subset runs in
# `make test` (tests/e2e/test_diagnosis_quick.py). test-diagnosis-ci is CI's form: every case, each judged by one
# verb chosen so that every verb is used (bench/diagnosis.py says how).
test-diagnosis: setup
	$(PY) -m bench.diagnosis

test-diagnosis-ci: setup
	$(PY) -m bench.diagnosis --one-verb

test-fast: setup
	$(PY) -m pytest -q -m "not e2e and not multinode and not component"

# The hostile-input fuzz tier at eight times the examples and budget `make test` gives it, plus the 10 MB lines
# and the 100 MB log (minutes on a busy 2-core box; each prints its figures).
# FUZZ_SCALE: CI runs it at 2 beside its set-up, which it would outlast at 8 (every test still runs).
FUZZ_SCALE ?= 8
test-hostile: setup
	P2P_SOAK=1 P2P_FUZZ_SCALE=$(FUZZ_SCALE) $(PY) -m pytest -q -rs -s -m fuzz tests/unit

# Benchmarks (bench/suite) print figures with ratios and write bench/results/<stamp>/ (and
# bench/results/latest.md); they never fail on timings. bench-quick stays under 10 minutes on a 2-core box;
# bench adds vLLM.
bench: setup
	P2P_VLLM_VENV=$(VLLM_VENV) $(PY) -m bench.suite

bench-quick: setup
	$(PY) -m bench.suite --quick --readme

# CI's form of bench-quick: every benchmark at its smallest sizes (exit 1 when one fails); `make bench-quick`
# itself, which rewrites the README's targets table, runs before a commit that lands.
bench-ci: setup
	$(PY) -m bench.suite --tiny

# Multi-peer behaviour on temporary local fleets of 2, 4 and 8 servers (about 6 minutes on a busy 2-core box):
# who serves a prefix held by one, two or no peers, lookup ms against N, the 8-peer lookup target.
bench-peers: setup
	$(PY) -m p2p_ops.cli bench peers --nodes 2,4,8

# The layering (import-linter contracts in pyproject.toml) and no import cycle at all, lazy imports included;
# mypy over the packages [tool.mypy] names (seconds: its cache is .mypy_cache).
lint: setup
	shellcheck .ci/run $$(git ls-files '*.sh' ':!tests/fixtures')
	$(PY) -m pyflakes p2p_ops p2p_runtime tests scripts bench
	$(PY) -m mypy
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q tests/unit/test_import_graph.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(ROUTER_VENV) p2p-run
