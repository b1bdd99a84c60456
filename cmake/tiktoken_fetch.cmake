# Script behind the tiktoken_ranks target (cmake/tiktoken.cmake): fetches js-tiktoken VERSION
# (checked against INTEGRITY) into WORK with NPM_FETCH (cmake/npm_fetch.cmake), then copies the
# rank files precon reads and a license note into OUT.
cmake_minimum_required(VERSION 3.25)
foreach(var VERSION INTEGRITY WORK OUT NPM_FETCH)
  if(NOT ${var})
    message(FATAL_ERROR "tiktoken_fetch: pass -D${var}=...")
  endif()
endforeach()

set(package ${WORK}/js-tiktoken-${VERSION})
if(NOT EXISTS ${package}/dist/ranks/o200k_base.cjs)
  execute_process(COMMAND ${CMAKE_COMMAND} -DPACKAGE=js-tiktoken -DVERSION=${VERSION} -DINTEGRITY=${INTEGRITY}
                          -DDEST=${package} -P ${NPM_FETCH}
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "tiktoken_fetch: could not fetch js-tiktoken ${VERSION} (the npm registry is needed once; "
                        "or configure with -DPRECON_FETCH_TIKTOKEN=OFF and set PRECON_TIKTOKEN_DIR at run time)")
  endif()
endif()

file(MAKE_DIRECTORY ${OUT})
foreach(encoding gpt2 cl100k_base o200k_base)
  file(COPY_FILE ${package}/dist/ranks/${encoding}.cjs ${OUT}/${encoding}.cjs ONLY_IF_DIFFERENT)
endforeach()
file(READ ${package}/package.json manifest)
string(JSON license GET "${manifest}" license)
file(WRITE ${OUT}/LICENSE
     "The files gpt2.cjs, cl100k_base.cjs and o200k_base.cjs are dist/ranks/ of the npm package\n"
     "js-tiktoken ${VERSION} (a JavaScript port of OpenAI's tiktoken, whose encodings they hold),\n"
     "copied unchanged. License: ${license}, as the package's package.json declares; the package\n"
     "ships no license text of its own. tiktoken itself is MIT-licensed by OpenAI.\n")
