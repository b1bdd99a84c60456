# tiktoken's encodings (gpt2, cl100k_base, o200k_base) as js-tiktoken ships them: the build
# fetches the pinned npm package (cmake/npm_fetch.cmake checks its sha512; no npm install) and
# copies ranks/<name>.cjs with a license note into <build>/share/precon/tiktoken, where the
# worker looks when nothing else is configured (worker/data/tokenizer.h gives the search order);
# `cmake --install` puts them at <prefix>/share/precon/tiktoken, beside <prefix>/bin's programs.
# The pin is the one tests/interop/package-lock.json holds, so the interop tests compare against
# the same ranks.
include(GNUInstallDirs)
set(PRECON_TIKTOKEN_VERSION 1.0.21)
set(PRECON_TIKTOKEN_INTEGRITY
    "sha512-biOj/6M5qdgx5TKjDnFT1ymSpM5tbd3ylwDtrQvFQSu0Z7bBYko2dF+W/aUkXUPuk6IVpRxk/3Q2sHOzGlS36g==")
set(PRECON_TIKTOKEN_OUT ${PROJECT_BINARY_DIR}/share/precon/tiktoken)

if(TARGET precon_worker)
  target_compile_definitions(precon_worker PRIVATE PRECON_TIKTOKEN_BUILD_DIR="${PRECON_TIKTOKEN_OUT}")
endif()

# OFF: no download; `--tokenizer gpt2|cl100k_base|o200k_base` then needs PRECON_TIKTOKEN_DIR.
option(PRECON_FETCH_TIKTOKEN "Fetch js-tiktoken's rank files at build time (target tiktoken_ranks)" ON)
if(NOT PRECON_FETCH_TIKTOKEN)
  return()
endif()

add_custom_command(
  OUTPUT ${PRECON_TIKTOKEN_OUT}/.fetched
  COMMAND ${CMAKE_COMMAND} -DVERSION=${PRECON_TIKTOKEN_VERSION} -DINTEGRITY=${PRECON_TIKTOKEN_INTEGRITY}
          -DWORK=${PROJECT_BINARY_DIR}/tiktoken-npm -DOUT=${PRECON_TIKTOKEN_OUT}
          -DNPM_FETCH=${PROJECT_SOURCE_DIR}/cmake/npm_fetch.cmake -P ${PROJECT_SOURCE_DIR}/cmake/tiktoken_fetch.cmake
  COMMAND ${CMAKE_COMMAND} -E touch ${PRECON_TIKTOKEN_OUT}/.fetched
  DEPENDS ${PROJECT_SOURCE_DIR}/cmake/tiktoken.cmake ${PROJECT_SOURCE_DIR}/cmake/tiktoken_fetch.cmake
          ${PROJECT_SOURCE_DIR}/cmake/npm_fetch.cmake
  COMMENT "tiktoken rank files (js-tiktoken ${PRECON_TIKTOKEN_VERSION}, fetched once) -> share/precon/tiktoken"
  VERBATIM)
add_custom_target(tiktoken_ranks ALL DEPENDS ${PRECON_TIKTOKEN_OUT}/.fetched)
# The programs that tokenize find the ranks in the build tree as soon as they are built.
foreach(program precon-train precon)
  if(TARGET ${program})
    add_dependencies(${program} tiktoken_ranks)
  endif()
endforeach()

install(DIRECTORY ${PRECON_TIKTOKEN_OUT}/ DESTINATION ${CMAKE_INSTALL_DATADIR}/precon/tiktoken PATTERN .fetched EXCLUDE)
