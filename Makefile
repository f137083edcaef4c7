# The two commands a newcomer needs: `make demo` and `make test`. Both install dependencies first.
JOBS ?= $(shell nproc)

.PHONY: deps build demo test test-release test-debug build-cuda docs bench format clean

deps:
	@scripts/install-deps.sh

build: deps
	cmake --preset release
	cmake --build --preset release -j $(JOBS)

# Runs the main job: trains a character-level GPT on Tiny Shakespeare on the CPU for about three
# minutes and samples from it (scripts/demo.sh; the run is left in out/demo).
demo: build
	scripts/demo.sh

# Every test: the release build, then the whole suite again under ASan + UBSan.
test: test-release test-debug

test-release: build
	ctest --preset release -j $(JOBS)

test-debug: deps
	cmake --preset debug
	cmake --build --preset debug -j $(JOBS)
	ctest --preset debug -j $(JOBS)

# Compiles the CUDA backend (needs the CUDA toolkit; nothing runs without a GPU).
build-cuda: deps
	cmake --preset cuda
	cmake --build --preset cuda -j $(JOBS)

# Tessera vs PyTorch on the op workloads of bench/ (writes a markdown table to stdout).
bench: build
	scripts/bench.sh

docs: build
	cmake --build --preset release --target docs

format:
	clang-format -i $$(git ls-files '*.h' '*.cpp' '*.cu')

clean:
	rm -rf build
