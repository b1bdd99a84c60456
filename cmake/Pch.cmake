# Precompiled headers: the third-party and standard headers that most translation units parse
# (nlohmann/json in the worker's and controller's interfaces, Asio in the scheduler's, GoogleTest
# in every test) are parsed once a target instead of once a unity batch.
#
# On by default. Off with -DPRECON_PCH=OFF, and by default when a compiler launcher (ccache) is
# set: a launcher caches whole compilations, which precompiled headers defeat.
if(CMAKE_CXX_COMPILER_LAUNCHER)
  set(PRECON_PCH_DEFAULT OFF)
else()
  set(PRECON_PCH_DEFAULT ON)
endif()
option(PRECON_PCH "Precompile the heavy third-party and standard headers" ${PRECON_PCH_DEFAULT})

set(PRECON_PCH_STD
  <algorithm> <chrono> <cmath> <cstdint> <filesystem> <fstream> <functional> <map> <memory>
  <optional> <set> <sstream> <string> <string_view> <unordered_map> <utility> <vector>)

# precon_pch(TARGET [JSON] [ASIO] [GTEST]): precompile the standard headers and the named groups
# for TARGET (a target of C++ sources only).
function(precon_pch target)
  if(NOT PRECON_PCH)
    return()
  endif()
  cmake_parse_arguments(PCH "JSON;ASIO;GTEST" "" "" ${ARGN})
  set(headers ${PRECON_PCH_STD})
  if(PCH_JSON)
    list(APPEND headers <nlohmann/json.hpp>)
  endif()
  if(PCH_ASIO)
    list(APPEND headers <boost/asio/io_context.hpp> <boost/asio/steady_timer.hpp>)
  endif()
  if(PCH_GTEST)
    list(APPEND headers <gtest/gtest.h>)
  endif()
  target_precompile_headers(${target} PRIVATE ${headers})
endfunction()
