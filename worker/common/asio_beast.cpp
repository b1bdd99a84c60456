// Asio's and Beast's compiled parts (io_context, sockets, timers, the HTTP parser), built once
// here. Every target that links precon_worker compiles with BOOST_ASIO_SEPARATE_COMPILATION and
// BOOST_BEAST_SEPARATE_COMPILATION (worker/CMakeLists.txt), so the files that include Asio or
// Beast declare these functions instead of compiling them again in each translation unit.
#include <boost/asio/impl/src.hpp>
#include <boost/beast/src.hpp>
