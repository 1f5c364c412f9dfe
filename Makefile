# Thin driver over CMake. `make demo` and `make test` are the two commands in
# the README; both install what is missing first (scripts/setup.sh).
BUILD      ?= build
BUILD_TYPE ?= Release
JOBS       ?= 2
CMAKE_ARGS ?=

.PHONY: all setup configure build demo test asan clean

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

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The whole suite under AddressSanitizer + UndefinedBehaviorSanitizer.
asan:
	$(MAKE) test BUILD=build-asan BUILD_TYPE=Debug CMAKE_ARGS="-DMFSDP_SANITIZE=ON"

clean:
	rm -rf $(BUILD)
