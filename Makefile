# Thin wrapper over CMake. `make demo` and `make test` work on a fresh Debian 12 machine:
# they install missing packages (as root; otherwise they print the apt-get line), build and run.
BUILD ?= build
JOBS ?= 2
export OMPI_ALLOW_RUN_AS_ROOT ?= 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM ?= 1
export OMPI_MCA_rmaps_base_oversubscribe ?= 1

.PHONY: all deps build demo test asan fuzz bench clean

all: build

deps:
	@scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The main job on its built-in default: on 2 ranks with 11.4 MiB each, osdp profiles the ranks,
# plans per-operator sharding for micro-batch 64 (ddp fits there only by recomputing both
# layers), measures the best candidates against the uniform ddp / zero2 / zero3 plans, trains the
# tiny GPT on 3-digit addition with the measured fastest (one problem a sequence, lr 1e-2 with a
# cosine decay: >= 96% held-out exact-match for seeds 1-3 from 1200 steps), and ends with that
# comparison and held-out problems the trained model answers. About 30 s from a built tree.
DEMO_RANKS ?= 2
DEMO_MODEL ?= tiny
DEMO_MEM ?= 11.4MiB
DEMO_STEPS ?= 2000
DEMO_LR ?= 1e-2
DEMO_SEED ?= 1337
demo: build
	mpirun --oversubscribe --bind-to none -np $(DEMO_RANKS) $(BUILD)/osdp train --model $(DEMO_MODEL) \
	  --plan auto --mem-limit $(DEMO_MEM) --batch 64 --seq 13 --steps $(DEMO_STEPS) --lr $(DEMO_LR) \
	  --lr-schedule cosine --seed $(DEMO_SEED) --eval-every 500

# The whole suite, then the unit tests again under AddressSanitizer + UBSan.
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	@$(MAKE) --no-print-directory asan

asan: deps
	@cmake -S . -B $(BUILD)-asan -DCMAKE_BUILD_TYPE=Debug -DOSDP_SANITIZE=ON >/dev/null
	@cmake --build $(BUILD)-asan -j $(JOBS)
	cd $(BUILD)-asan && ASAN_OPTIONS=detect_leaks=0 ctest --output-on-failure -j $(JOBS) -L sanitize

# Every file parser under libFuzzer (clang, ASan + UBSan), FUZZ_RUNS executions each from the
# seed corpus fuzz/corpus/<target>/; crash reproducers land in build-fuzz/crashes/<target>/.
# FUZZ_TARGETS picks targets; see fuzz/README.md.
FUZZ_RUNS ?= 1000000
FUZZ_TARGETS ?= model plan device checkpoint safetensors train_state tokens hf_config st_index
fuzz: deps
	@CC=clang cmake -S . -B $(BUILD)-fuzz -DCMAKE_C_COMPILER=clang -DOSDP_FUZZ=ON -DOSDP_CUDA=OFF \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD)-fuzz -j $(JOBS) --target fuzz_targets
	fuzz/run.sh $(BUILD)-fuzz $(FUZZ_RUNS) $(FUZZ_TARGETS)

bench: build
	bench/compare_plans.sh $(BUILD)
	bench/fidelity.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-fuzz
