# cmake -DFILE=path -DPATTERN=text -P FileContains.cmake: fails unless the
# file contains the text (a ctest check on a generated file).
file(READ "${FILE}" content)
string(FIND "${content}" "${PATTERN}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${FILE} does not contain '${PATTERN}'")
endif()
