# Thin wrapper over CMake. The README's two commands are `make demo` and
# `make test`; both install missing Debian packages first (as root, apt-get).
#
#   make            release build: build/nostall, build/libnostall.so
#   make test       every test under ASan+UBSan, then under TSan (-Werror), and
#                   the clang build's unit tests and fuzz corpus replays
#   make asan|tsan  one sanitizer build and its tests
#   make clang      clang-14 -Werror build (build-clang): unit tests, corpus replays
#   make fuzz       libFuzzer binaries (build-fuzz), each run FUZZ_SECONDS (60)
#   make python-test  the Python binding's tests (Debian's /usr/bin/python3)
#   make test-torch2  the same Python tests on torch 2.x from PyPI (the python
#                   of bench/peers/venv.sh's venv: torch 2.14.1, torchvision
#                   0.29.2; several GB, made once); not part of make test
#   make demo       generate a small dataset in a temp dir and run the loader
#   make bench      benchmarks (bench/)
#   make bench-peers  nostall beside DALI, SPDL, torchvision 0.2x, Grain, FFCV
#                   from PyPI (bench/peers/images.sh; never part of make test)
#   make bench-peers-shards  shards: nostall, webdataset, LitData, Mosaic (local, S3)
#   make install    install library, header, CLI, pkg-config file and the
#                   Python package (PREFIX; PYSITE for the package)
#   make format     clang-format the C sources (.clang-format's style)
#   make format-check  fail if any C source differs from that style (in make test)

PREFIX ?= /usr/local
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
PYTHON := /usr/bin/python3
CTEST_FLAGS ?= --output-on-failure -j$(JOBS)

# Debian 12 packages: what the build (and make demo) needs, and what the
# tests add (the CLI tests parse JSON with python3; the binding's tests use
# numpy, torch, torchvision, PIL and pytest; python3-venv and python3-pip
# make the venv, ~/.cache/nostall/moto, that holds the S3 server the s3://
# tests start: moto's, from PyPI, installed by tests/lib_s3.sh ensure; and
# ~/.cache/nostall/webdataset, webdataset 1.0.2 for the interop tests,
# tests/lib_pyvenv.sh webdataset).
BUILD_PACKAGES := gcc make cmake pkg-config libjpeg62-turbo-dev libpng-dev \
                  liburing-dev libcurl4-openssl-dev libjansson-dev \
                  libsndfile1-dev libsoxr-dev libfftw3-dev
# clang for `make clang` and `make fuzz` (libFuzzer and the sanitizer
# runtimes are in libclang-rt-14-dev).
FUZZ_PACKAGES := clang-14 libclang-rt-14-dev
FUZZ_SECONDS ?= 60
# The style is pinned to clang-format 14 (another version formats some
# constructs differently).
FORMAT_PACKAGES := clang-format-14
FORMAT_FILES = $(sort $(wildcard include/*.h src/*.c src/*/*.[ch] tools/*.[ch] tests/*.[ch] \
                 tests/fuzz/*.c examples/*.c bench/*.c))
TEST_PACKAGES := python3 python3-numpy python3-pytest python3-torch \
                 python3-torchvision python3-pil python3-matplotlib nginx chromium \
                 openmpi-bin libopenmpi-dev python3-mpi4py python3-pip python3-venv \
                 python3-setuptools python3-wheel python3-torchaudio

.PHONY: all deps test-deps build release-test python-test asan tsan test demo bench install format clean
.PHONY: fuzz-deps clang fuzz format-check test-reset test-torch2

all: build

deps:
	@bash tools/install-deps.sh $(BUILD_PACKAGES)

test-deps:
	@bash tools/install-deps.sh $(TEST_PACKAGES)
	@bash tests/lib_s3.sh ensure > /dev/null
	@bash tests/lib_pyvenv.sh webdataset > /dev/null

fuzz-deps:
	@bash tools/install-deps.sh $(FUZZ_PACKAGES)

build: deps
	@cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build build -j$(JOBS)

asan: deps test-deps
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DNOSTALL_SANITIZE=address -DNOSTALL_WERROR=ON >/dev/null
	@cmake --build build-asan -j$(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  bash tools/run-tests.sh asan build-asan ctest $(CTEST_FLAGS)

tsan: deps test-deps
	@cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNOSTALL_SANITIZE=thread -DNOSTALL_WERROR=ON >/dev/null
	@cmake --build build-tsan -j$(JOBS)
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	  bash tools/run-tests.sh tsan build-tsan ctest $(CTEST_FLAGS)

# test-deps before build: a build configured before libopenmpi-dev is
# installed has no MPI (cmake/mpi.cmake searches again while it is missing)
release-test: test-deps build
	bash tools/run-tests.sh release build ctest $(CTEST_FLAGS)

# The Python binding's tests, against the release build.
python-test: test-deps build
	NOSTALL_LIBRARY=$(CURDIR)/build/libnostall.so NOSTALL_CLI=$(CURDIR)/build/nostall \
	  bash tools/run-tests.sh python . pytest -q -p no:cacheprovider tests/python

# The Python tests again on torch 2.x (bench/peers/venv.sh prints its python;
# it installs the venv from PyPI the first time). Its skips are recorded
# apart from make test's (.test-skips-torch2) and printed loudly at the end.
test-torch2: test-deps build
	@py=$$(bash bench/peers/venv.sh) && rm -rf .test-skips-torch2 && \
	  NOSTALL_TEST_PYTHON=$$py NOSTALL_SKIP_DIR=$(CURDIR)/.test-skips-torch2 \
	  NOSTALL_LIBRARY=$(CURDIR)/build/libnostall.so NOSTALL_CLI=$(CURDIR)/build/nostall \
	  bash tools/run-tests.sh torch2 . pytest -q -p no:cacheprovider tests/python && \
	  NOSTALL_SKIP_DIR=$(CURDIR)/.test-skips-torch2 NOSTALL_RUN_NAME="make test-torch2" \
	  bash tools/run-tests.sh --summary

# clang-14, -Werror, release: the unit tests (test_*) and the fuzz corpus
# replays (fuzz_replay_*), beside gcc's builds.
clang: deps test-deps fuzz-deps
	@cmake -S . -B build-clang -DCMAKE_C_COMPILER=clang-14 -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNOSTALL_WERROR=ON >/dev/null
	@cmake --build build-clang -j$(JOBS)
	bash tools/run-tests.sh clang build-clang ctest $(CTEST_FLAGS) -R '^(test_|fuzz_replay_)'

# libFuzzer: every tests/fuzz/fuzz_<name>.c for FUZZ_SECONDS each on its
# seeds (new inputs in build-fuzz/fuzz-scratch, crashes in
# build-fuzz/fuzz-artifacts; tests/fuzz/run.sh). FUZZ_RUNS=N stops at N
# executions instead (FUZZ_SECONDS=0).
fuzz: deps fuzz-deps
	@cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang-14 -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNOSTALL_SANITIZE=address -DNOSTALL_FUZZ=ON >/dev/null
	@cmake --build build-fuzz -j$(JOBS) --target fuzz_all
	bash tests/fuzz/run.sh build-fuzz $(FUZZ_SECONDS)

# Every suite records what it skipped (tools/run-tests.sh); the summary
# prints them loudly (NOSTALL_STRICT_SKIPS=1 makes a skip fail the run).
test-reset:
	@bash tools/run-tests.sh --reset

test: test-reset release-test python-test asan tsan clang format-check
	@bash tools/run-tests.sh --summary
	@echo "make test: all test suites passed"

demo: build
	@bash tools/demo.sh build/nostall

bench: build
	@bash bench/run.sh
	@bash bench/run.sh --photo

# The 2026 field, from a pinned PyPI venv (bench/peers/); docs/performance.md.
.PHONY: bench-peers
bench-peers: build
	@bash bench/peers/images.sh

# Shards side by side (issue 34): nostall's stream and indexed modes,
# webdataset, LitData, Mosaic Streaming, local and from moto on loopback,
# in the peers' PyPI venv (bench/peers/venv.sh); never part of make test.
.PHONY: bench-peers-shards
bench-peers-shards: build
	@mkdir -p build/bench
	/usr/bin/python3 bench/peers/shards.py --tokens --out build/bench/shards_peers.json \
	  --markdown build/bench/shards_peers.md

# The Python package goes where Debian's python3 looks for $(PREFIX)'s
# packages (/usr/local/lib/python3.11/dist-packages for /usr/local), with
# libnostall.so and the CLI inside it (setup.py; pip from python3-pip).
PYSITE ?= $(PREFIX)/lib/python3.$(shell $(PYTHON) -c 'import sys; print(sys.version_info[1])')/dist-packages

# The installed library is built apart, without the test hooks
# (src/common/testhooks.h): `build` keeps them for the tests.
install: deps
	@cmake -S . -B build-install -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNOSTALL_TEST_HOOKS=OFF >/dev/null
	@cmake --build build-install -j$(JOBS)
	cmake --install build-install --prefix $(PREFIX)
	NOSTALL_PREBUILT=$(CURDIR)/build-install $(PYTHON) -m pip install --no-build-isolation --no-deps \
	  --no-index --quiet --upgrade --target $(PYSITE) .

format:
	@bash tools/install-deps.sh $(FORMAT_PACKAGES)
	clang-format-14 -i $(FORMAT_FILES)

format-check:
	@bash tools/install-deps.sh $(FORMAT_PACKAGES)
	@clang-format-14 --dry-run -Werror $(FORMAT_FILES) || \
	  { echo "format-check: the files above differ from .clang-format's style (make format)"; exit 1; }
	@echo "format-check: $(words $(FORMAT_FILES)) files in .clang-format's style"

clean:
	rm -rf build build-asan build-tsan build-clang build-fuzz build-install .test-skips .test-skips-torch2
