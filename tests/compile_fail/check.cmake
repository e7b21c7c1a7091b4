# cmake -DCXX=... -DFLAGS=... -DSRC=... -P check.cmake: each case of SRC must
# fail to compile with its static_assert's message (a refusal that is not
# a compile error, or one for another reason, fails the test).
set(cases "1|a const Eigen matrix or array" "2|no stored coefficients" "3|read-only Eigen view" "4|no dtype for this scalar")
separate_arguments(flags UNIX_COMMAND "${FLAGS}")
foreach(c IN LISTS cases)
  string(REPLACE "|" ";" parts "${c}")
  list(GET parts 0 n)
  list(GET parts 1 expected)
  execute_process(COMMAND ${CXX} ${flags} -fsyntax-only -DCASE=${n} ${SRC}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0)
    message(FATAL_ERROR "case ${n} compiled; expected the refusal \"${expected}\"")
  endif()
  string(FIND "${err}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "case ${n} failed without \"${expected}\":\n${err}")
  endif()
  message(STATUS "case ${n}: refused (${expected})")
endforeach()
