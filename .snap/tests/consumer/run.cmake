# The consumer test: a user's project gets tapegrad three ways and runs.
#  1. find_package from an install tree of the built library: the program,
#     a program that links tapegrad::tensor alone, and every installed header
#     compiled on its own;
#  2. add_subdirectory of the source tree (shared libraries, CPU only);
#  3. FetchContent from the local source tree (static libraries, CPU only).
# 2 and 3 also check that tapegrad builds no tests when it is not the
# top-level project.
file(REMOVE_RECURSE "${TG_WORK_DIR}")
# The consumer builds take ccache's hits from the main build but store
# nothing (a test writes only into the build tree and temporary folders).
set(ENV{CCACHE_READONLY} 1)
set(ENV{CCACHE_NOSTATS} 1)
set(prefix "${TG_WORK_DIR}/prefix")
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()
set(common -G "${TG_GENERATOR}" -DCMAKE_CXX_COMPILER=${TG_CXX} -DCMAKE_BUILD_TYPE=Release)
if(TG_CCACHE)
  list(APPEND common -DCMAKE_CXX_COMPILER_LAUNCHER=${TG_CCACHE})
endif()

run(${CMAKE_COMMAND} --install "${TG_BUILD_DIR}" --prefix "${prefix}")
file(GLOB_RECURSE headers RELATIVE "${prefix}/include" "${prefix}/include/tapegrad/*.h")
list(LENGTH headers n)
if(n LESS 20)
  message(FATAL_ERROR "only ${n} headers installed under ${prefix}/include")
endif()
string(REPLACE ";" "|" headers_arg "${headers}")
run(${CMAKE_COMMAND} -S "${TG_SOURCE_DIR}" -B "${TG_WORK_DIR}/package" ${common}
    -DTG_MODE=package -DCMAKE_PREFIX_PATH=${prefix} "-DTG_HEADERS=${headers_arg}")
run(${CMAKE_COMMAND} --build "${TG_WORK_DIR}/package")
run("${TG_WORK_DIR}/package/consumer")
run("${TG_WORK_DIR}/package/tensor_only")
message(STATUS "package: ${n} installed headers compile on their own")

foreach(mode subdirectory fetchcontent)
  # Same flags as the main build (so ccache serves its objects), CPU only.
  set(extra -DTAPEGRAD_CUDA=OFF -DTAPEGRAD_WERROR=${TG_WERROR})
  if(mode STREQUAL "fetchcontent")
    list(APPEND extra -DBUILD_SHARED_LIBS=OFF)
  endif()
  run(${CMAKE_COMMAND} -S "${TG_SOURCE_DIR}" -B "${TG_WORK_DIR}/${mode}" ${common} ${extra}
      -DTG_MODE=${mode} -DTG_TAPEGRAD_SOURCE=${TG_TAPEGRAD_SOURCE})
  run(${CMAKE_COMMAND} --build "${TG_WORK_DIR}/${mode}" --target consumer)
  run("${TG_WORK_DIR}/${mode}/consumer")
endforeach()
