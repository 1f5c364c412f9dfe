# Thin driver over CMake. `make demo` and `make test` are the two commands in
# the README; both install what is missing first (scripts/setup.sh).
BUILD      ?= build
BUILD_TYPE ?= Release
JOBS       ?= 2
FUZZ_SECONDS ?= 60
CMAKE_ARGS ?=

.PHONY: all setup configure build demo test asan fuzz clean

all: build

setup:
	@bash scripts/setup.sh

$(BUILD)/build.ninja: | setup
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DPython_EXECUTABLE="$$(command -v python3)" $(CMAKE_ARGS)

configure: setup $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	@bash scripts/demo.sh $(BUILD)

# FUZZ=0 skips the fuzz targets' runs (FUZZ_SECONDS each, build-fuzz/).
FUZZ ?= 1
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	@if [ "$(FUZZ)" = 1 ]; then FUZZ_OPTIONAL=1 bash scripts/fuzz.sh build-fuzz $(FUZZ_SECONDS); fi

# The whole suite under AddressSanitizer + UndefinedBehaviorSanitizer.
asan:
	$(MAKE) test FUZZ=0 BUILD=build-asan BUILD_TYPE=Debug CMAKE_ARGS="-DMFSDP_SANITIZE=ON"

# The fuzz targets (test/fuzz) as libFuzzer targets (clang-22, ASan, UBSan)
# in build-fuzz, each run FUZZ_SECONDS from its seeds.
fuzz: setup
	@bash scripts/fuzz.sh build-fuzz $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD)
