# cmake -DMPIEXEC=mpirun -DNP=2 -DTRAINER=path -DLIB_A=a.so -DLIB_B=b.so
#       -P SameLosses.cmake
# Runs the example trainer on each library under mpirun and fails unless
# both print the same non-empty sequence of "step N: loss X" lines (a ctest
# check that two lowerings of one plan train alike).
foreach(which A B)
  execute_process(
    COMMAND ${MPIEXEC} --allow-run-as-root --oversubscribe -np ${NP} ${TRAINER}
            ${LIB_${which}} --steps 5
    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 120)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the trainer on ${LIB_${which}} failed (${rc}):\n${out}${err}")
  endif()
  string(REGEX MATCHALL "step [0-9]+: loss [0-9.]+" losses_${which} "${out}")
  message(STATUS "${LIB_${which}}: ${losses_${which}}")
endforeach()
if(NOT losses_A)
  message(FATAL_ERROR "no losses printed")
endif()
if(NOT losses_A STREQUAL losses_B)
  message(FATAL_ERROR "different losses:\n  ${losses_A}\n  ${losses_B}")
endif()
