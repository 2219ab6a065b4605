# The CUDA grammar: npm package tree-sitter-cuda, pinned by version and integrity.
# Fetched into the build tree at configure time; nothing of it is committed.
set(KL_GRAMMAR_VERSION 0.20.4)
# sha512 from the registry's integrity field
# (sha512-mZiwGJEsPDLA6cweIYtGroSQoLu5+yLFl0I617OoODUL/+X62SrqOR60bxJDUkPBnsRUGi/EEcXfVIfOIJgNQw==), in hex.
set(KL_GRAMMAR_SHA512 9998b018912c3c32c0e9cc1e218b46ae8490a0bbb9fb22c597423ad7b3a838350bffe5fad92aea391eb46f12435243c19ec4541a2fc411c5df5487ce20980d43)

set(KL_GRAMMAR_DIR ${CMAKE_BINARY_DIR}/_grammar)
set(KL_GRAMMAR_TGZ ${KL_GRAMMAR_DIR}/tree-sitter-cuda-${KL_GRAMMAR_VERSION}.tgz)
set(KL_GRAMMAR_SRC ${KL_GRAMMAR_DIR}/package/src)

function(kl_grammar_verify out_ok)
  if(EXISTS ${KL_GRAMMAR_TGZ})
    file(SHA512 ${KL_GRAMMAR_TGZ} got)
    if(got STREQUAL KL_GRAMMAR_SHA512)
      set(${out_ok} TRUE PARENT_SCOPE)
      return()
    endif()
    message(WARNING "grammar: ${KL_GRAMMAR_TGZ} has sha512 ${got}, expected ${KL_GRAMMAR_SHA512}; fetching again")
    file(REMOVE ${KL_GRAMMAR_TGZ})
  endif()
  set(${out_ok} FALSE PARENT_SCOPE)
endfunction()

kl_grammar_verify(kl_grammar_ok)
if(NOT kl_grammar_ok)
  # A tarball may be supplied for offline builds: -DKL_GRAMMAR_TARBALL=/path/tree-sitter-cuda-0.20.4.tgz
  file(MAKE_DIRECTORY ${KL_GRAMMAR_DIR})
  if(KL_GRAMMAR_TARBALL)
    file(COPY_FILE ${KL_GRAMMAR_TARBALL} ${KL_GRAMMAR_TGZ})
  else()
    find_program(NPM_EXECUTABLE npm)
    if(NOT NPM_EXECUTABLE)
      message(FATAL_ERROR "grammar: npm is needed to fetch tree-sitter-cuda@${KL_GRAMMAR_VERSION} "
                          "(run scripts/bootstrap.sh, or pass -DKL_GRAMMAR_TARBALL=FILE)")
    endif()
    message(STATUS "grammar: npm pack tree-sitter-cuda@${KL_GRAMMAR_VERSION}")
    execute_process(COMMAND ${NPM_EXECUTABLE} pack --silent tree-sitter-cuda@${KL_GRAMMAR_VERSION}
                    WORKING_DIRECTORY ${KL_GRAMMAR_DIR}
                    RESULT_VARIABLE npm_rc OUTPUT_VARIABLE npm_out ERROR_VARIABLE npm_err)
    if(NOT npm_rc EQUAL 0)
      message(FATAL_ERROR "grammar: npm pack tree-sitter-cuda@${KL_GRAMMAR_VERSION} failed (${npm_rc}): ${npm_err}")
    endif()
  endif()
  kl_grammar_verify(kl_grammar_ok)
  if(NOT kl_grammar_ok)
    message(FATAL_ERROR "grammar: tree-sitter-cuda-${KL_GRAMMAR_VERSION}.tgz fails its integrity check")
  endif()
endif()

# Extract once per verified tarball: the stamp holds its hash, so an unchanged grammar
# keeps its files (and their times), and the ~25 s compile is not repeated.
set(kl_stamp ${KL_GRAMMAR_DIR}/extracted.sha512)
set(kl_stamp_hash "")
if(EXISTS ${kl_stamp})
  file(READ ${kl_stamp} kl_stamp_hash)
endif()
if(NOT EXISTS ${KL_GRAMMAR_SRC}/parser.c OR NOT kl_stamp_hash STREQUAL KL_GRAMMAR_SHA512)
  file(ARCHIVE_EXTRACT INPUT ${KL_GRAMMAR_TGZ} DESTINATION ${KL_GRAMMAR_DIR}
       PATTERNS package/src/parser.c package/src/scanner.c package/src/tree_sitter
                package/src/node-types.json package/LICENSE)
  file(WRITE ${kl_stamp} ${KL_GRAMMAR_SHA512})
endif()

add_library(kl_grammar STATIC ${KL_GRAMMAR_SRC}/parser.c ${KL_GRAMMAR_SRC}/scanner.c)
target_include_directories(kl_grammar PRIVATE ${KL_GRAMMAR_SRC})
# Generated code: not ours to warn about, and optimisation takes most of its build time.
set_target_properties(kl_grammar PROPERTIES C_STANDARD 99 POSITION_INDEPENDENT_CODE ON)
target_compile_options(kl_grammar PRIVATE -w -O1 -g0)
