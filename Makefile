# annal — developer entry points.  `make demo` and `make test` set up
# everything they need (virtualenv, Python dependencies) on a fresh machine.

PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
PKGS    = storage deploy zk broker controller producer admin consumer client pipeline kafkaproto security webconsole
STAMP   = $(VENV)/.installed

.PHONY: demo test lint typecheck bench setup os-deps clean

setup: $(STAMP) os-deps

# OS packages, installed when missing (deploy/os-deps.sh): ZooKeeper (Debian's
# package: the real server the tests and the local cluster run), kcat (a Kafka
# client the Kafka-listener tests run), and podman, docker-compose and
# debootstrap, which run docker-compose.yml for real (tests/compose) without a
# Docker engine or an image registry.
os-deps:
	@sh deploy/os-deps.sh

$(STAMP): pyproject.toml setup.py storage/_walker.c storage/_columns.c storage/_encoder.c storage/_readers.h
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,spark]'
	touch $(STAMP)

demo: setup
	$(BIN)/python -m annal.demo $(if $(KEEP),--keep)

lint: setup
	$(BIN)/ruff check .

# mypy cannot follow setuptools' package-dir mapping, so it reads a tree of
# symlinks that mirrors the installed layout (annal/, annal/storage/, ...).
typecheck: setup
	rm -rf build/typecheck && mkdir -p build/typecheck/annal
	for f in annal/*.py; do ln -s ../../../$$f build/typecheck/annal/; done
	for p in $(PKGS); do ln -s ../../../$$p build/typecheck/annal/$$p; done
	ln -s ../../../proto/annal/v1 build/typecheck/annal/v1
	$(BIN)/mypy -p annal

# The suite runs on $(JOBS) parallel workers, a test file each at a time (each
# worker has its own ZooKeeper and its own slice of free ports: tests/conftest.py).
# The tests of the compiled modules' paths run first with their pure-Python
# twins (ANNAL_PURE_PYTHON=1, storage/compiled.py), then everything runs as
# installed.  pytest's exit 5 (no tests collected) is not a failure.
JOBS       ?= 3
PYTEST      = $(BIN)/pytest -q -n $(JOBS) --dist loadfile
PURE_TESTS  = tests/storage tests/pipeline/test_read_batches.py tests/test_dumplog.py

test: setup lint typecheck
	ANNAL_PURE_PYTHON=1 $(PYTEST) $(PURE_TESTS); rc=$$?; \
	  if [ $$rc -ne 0 ] && [ $$rc -ne 5 ]; then exit $$rc; fi
	$(PYTEST) tests; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 0; fi; exit $$rc

bench: setup
	$(BIN)/python bench/storage.py --quick
	$(BIN)/python bench/cluster.py --quick

clean:
	rm -rf $(VENV) build dist *.egg-info
