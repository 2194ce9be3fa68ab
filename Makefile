# Thin wrapper over CMake. `make demo` and `make test` work on a fresh Debian 12 machine:
# they install missing packages (as root; otherwise they print the apt-get line), build and run.
BUILD ?= build
JOBS ?= 2
export OMPI_ALLOW_RUN_AS_ROOT ?= 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM ?= 1
export OMPI_MCA_rmaps_base_oversubscribe ?= 1

.PHONY: all deps build demo test asan bench clean

all: build

deps:
	@scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The main job on its built-in default: a tiny GPT learns 3-digit addition.
demo: build
	$(BUILD)/osdp train

# The whole suite, then the unit tests again under AddressSanitizer + UBSan.
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	@$(MAKE) --no-print-directory asan

asan: deps
	@cmake -S . -B $(BUILD)-asan -DCMAKE_BUILD_TYPE=Debug -DOSDP_SANITIZE=ON >/dev/null
	@cmake --build $(BUILD)-asan -j $(JOBS)
	cd $(BUILD)-asan && ASAN_OPTIONS=detect_leaks=0 ctest --output-on-failure -j $(JOBS) -L sanitize

bench: build
	bench/compare_plans.sh

clean:
	rm -rf $(BUILD) $(BUILD)-asan
