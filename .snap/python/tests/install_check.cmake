# The Python package installed with `cmake --install --prefix P` lands under
# P and imports from there with nothing but PYTHONPATH set (no
# LD_LIBRARY_PATH: the extension's run path finds P's libraries).
file(REMOVE_RECURSE "${TG_PREFIX}")
execute_process(COMMAND ${CMAKE_COMMAND} --install "${TG_BUILD_DIR}" --prefix "${TG_PREFIX}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc}):\n${out}\n${err}")
endif()
if(IS_ABSOLUTE "${TG_PACKAGE_DIR}")
  message(FATAL_ERROR "TAPEGRAD_PYTHON_INSTALL_DIR is absolute (${TG_PACKAGE_DIR}): the package would leave the prefix")
endif()
# Every installed file is under the prefix.
string(REGEX MATCHALL "Installing: [^\n]*|Up-to-date: [^\n]*" lines "${out}")
foreach(l ${lines})
  string(REGEX REPLACE "^(Installing|Up-to-date): " "" f "${l}")
  string(FIND "${f}" "${TG_PREFIX}/" at)
  if(NOT at EQUAL 0)
    message(FATAL_ERROR "installed outside the prefix ${TG_PREFIX}: ${f}")
  endif()
endforeach()
set(site "${TG_PREFIX}/${TG_PACKAGE_DIR}")
if(NOT EXISTS "${site}/tapegrad/__init__.py")
  message(FATAL_ERROR "no package at ${site}/tapegrad")
endif()
# LD_LIBRARY_PATH stays for third-party libraries outside the system's
# paths (TBB on the GPU machine), but must not lead to tapegrad's own.
set(ldpath "$ENV{LD_LIBRARY_PATH}")
foreach(own "${TG_BUILD_DIR}" "${TG_PREFIX}")
  string(FIND "${ldpath}" "${own}" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "LD_LIBRARY_PATH (${ldpath}) names ${own}: the test would not show the run path works")
  endif()
endforeach()
execute_process(
  COMMAND env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH=${ldpath} PYTHONPATH=${site} PYTHONNOUSERSITE=1 ${TG_PYTHON} -c
    "import tapegrad as tg, sys; assert tg.__file__.startswith(sys.argv[1]), tg.__file__; x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True); (x * x).sum().backward(); assert x.grad.tolist() == [2.0, 4.0, 6.0], x.grad.tolist(); print('imported from', tg.__file__)"
    "${site}"
  WORKING_DIRECTORY "${TG_PREFIX}"  # not the build tree's python/, which holds a package too
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "importing the installed package failed (${rc}):\n${out}\n${err}")
endif()
message(STATUS "${out}")
