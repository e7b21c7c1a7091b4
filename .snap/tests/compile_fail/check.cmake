# cmake -DCXX=... -DFLAGS=... -DSRC=... -P check.cmake: SRC must fail to
# compile, reporting every expected static_assert message (a file that
# compiles, or fails without one of them, fails the test).
set(cases "1|a const Eigen matrix or array" "2|no stored coefficients" "3|read-only Eigen view" "4|no dtype for this scalar")
separate_arguments(flags UNIX_COMMAND "${FLAGS}")
execute_process(COMMAND ${CXX} ${flags} -fsyntax-only ${SRC} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "${SRC} compiled; expected its refusals")
endif()
foreach(c IN LISTS cases)
  string(REPLACE "|" ";" parts "${c}")
  list(GET parts 1 expected)
  string(FIND "${err}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "no refusal \"${expected}\" in:\n${err}")
  endif()
  message(STATUS "refused: ${expected}")
endforeach()
