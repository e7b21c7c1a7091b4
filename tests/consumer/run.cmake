# Installs the built tapegrad into a scratch prefix, then configures, builds
# and runs tests/consumer against it, as a user's project would.
file(REMOVE_RECURSE "${TG_WORK_DIR}")
set(prefix "${TG_WORK_DIR}/prefix")
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()
run(${CMAKE_COMMAND} --install "${TG_BUILD_DIR}" --prefix "${prefix}")
run(${CMAKE_COMMAND} -S "${TG_SOURCE_DIR}" -B "${TG_WORK_DIR}/build" -G "${TG_GENERATOR}"
    -DCMAKE_CXX_COMPILER=${TG_CXX} -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build "${TG_WORK_DIR}/build")
run("${TG_WORK_DIR}/build/consumer")
