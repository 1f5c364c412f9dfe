#===- InstallTest.cmake - Build and run a trainer on an installed mfsdp ---===#
#
#   cmake -DBUILD=<build dir> -DSOURCE=<source dir> -DWORK=<scratch dir>
#         -DGENERATOR=<generator> -DMPIEXEC=<mpiexec>
#         [-DTRAINER_FLAGS=<compile and link flags>] -P InstallTest.cmake
# (TRAINER_FLAGS: the sanitizers, when the installed runtime has them.)
#
# `cmake --install` into WORK/prefix; a trainer project (this folder)
# configured with find_package(mfsdp) against it and built; a step library
# compiled by the installed mfsdp-compile (which must find the installed
# runtime by itself: no --runtime-* flag); the trainer run on 2 ranks,
# loading the installed libmfsdp_rt.
#
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(output "${out}" PARENT_SCOPE)
endfunction()

set(prefix "${WORK}/prefix")
file(REMOVE_RECURSE "${WORK}")
run("cmake --install" ${CMAKE_COMMAND} --install "${BUILD}" --prefix "${prefix}")
foreach(f include/mfsdp/runtime.h include/mfsdp/plan.h bin/mfsdp-compile
          lib/cmake/mfsdp/mfsdp-config.cmake
          lib/cmake/mfsdp/mfsdp-config-version.cmake)
  if(NOT EXISTS "${prefix}/${f}")
    message(FATAL_ERROR "cmake --install did not install ${f}")
  endif()
endforeach()

run("configuring the trainer" ${CMAKE_COMMAND} -S "${SOURCE}/test/install"
    -B "${WORK}/trainer" -G "${GENERATOR}" -DCMAKE_BUILD_TYPE=Release
    "-DCMAKE_PREFIX_PATH=${prefix}" "-DCMAKE_CXX_FLAGS=${TRAINER_FLAGS}"
    "-DCMAKE_EXE_LINKER_FLAGS=${TRAINER_FLAGS}")
run("building the trainer" ${CMAKE_COMMAND} --build "${WORK}/trainer")
file(READ "${WORK}/trainer/mfsdp-compile.txt" compile)
if(NOT compile STREQUAL "${prefix}/bin/mfsdp-compile")
  message(FATAL_ERROR "find_package(mfsdp) gave mfsdp-compile '${compile}'; "
                      "expected the installed ${prefix}/bin/mfsdp-compile")
endif()

run("the installed mfsdp-compile" "${compile}"
    "${SOURCE}/examples/trainer/model.json" --mesh=dp_shard=2 --policy=mixed_muon_adamw
    -o "${WORK}/libstep.so")
run("the trainer" ${MPIEXEC} --allow-run-as-root --oversubscribe -np 2
    "${WORK}/trainer/install-trainer" "${WORK}/libstep.so")
message("${output}")
if(NOT output MATCHES "runtime: ${prefix}/lib/libmfsdp_rt.so")
  message(FATAL_ERROR "the trainer did not load the installed libmfsdp_rt")
endif()
if(NOT output MATCHES "install-trainer: one step, [0-9]+ parameters as expected")
  message(FATAL_ERROR "the trainer did not finish its step")
endif()
