# The two commands a newcomer needs: `make demo` and `make test`. Both install dependencies first.
JOBS ?= $(shell nproc)

.PHONY: deps build demo test test-release test-debug build-cuda docs bench format clean \
        fuzz fuzz-smoke fuzz-build studio studio-screenshots

deps:
	@scripts/install-deps.sh

build: deps
	cmake --preset release
	cmake --build --preset release -j $(JOBS)

# Runs the main job: trains a character-level GPT on Tiny Shakespeare on the CPU for about three
# minutes and samples from it (scripts/demo.sh; the run is left in out/demo).
demo: build
	scripts/demo.sh

# Tessera Studio, the web app (front end built in): http://127.0.0.1:$(STUDIO_PORT). Its database,
# services' logs and API key live in studio-data/.
STUDIO_PORT ?= 8080
studio: build
	build/release/bin/tessera studio --port $(STUDIO_PORT) --data-dir studio-data

# Retakes docs/studio/*.png with the studio's end-to-end test (headless Chromium).
studio-screenshots: build
	tests/studio/run_web.sh e2e build/release/studio_web build/release/bin/tessera docs/studio

# Every test: the release build, then the whole suite again under ASan + UBSan.
test: test-release test-debug

test-release: build
	ctest --preset release -j $(JOBS)

test-debug: deps
	cmake --preset debug
	cmake --build --preset debug -j $(JOBS)
	ctest --preset debug -j $(JOBS)

# libFuzzer targets (fuzz/) of the debug build (clang, ASan + UBSan), each run for FUZZ_SECONDS one
# after another from its seeds in fuzz/corpus/; new inputs go to build/debug/fuzz/corpus/, crashes
# to build/debug/fuzz/crashes/ (scripts/fuzz.sh). fuzz-smoke is CI's short run.
FUZZ_SECONDS ?= 600
fuzz-build: deps
	cmake --preset debug
	cmake --build --preset debug -j $(JOBS) --target fuzz_targets

fuzz: fuzz-build
	scripts/fuzz.sh $(FUZZ_SECONDS)

fuzz-smoke: fuzz-build
	scripts/fuzz.sh 20

# Compiles the CUDA backend (needs the CUDA toolkit; nothing runs without a GPU).
build-cuda: deps
	cmake --preset cuda
	cmake --build --preset cuda -j $(JOBS)

# Every `tessera bench` suite on this machine; regenerates BENCHMARKS.md (scripts/bench.sh).
bench: build
	scripts/bench.sh

docs: build
	cmake --build --preset release --target docs

format:
	clang-format -i $$(git ls-files '*.h' '*.cpp' '*.cu')

clean:
	rm -rf build
