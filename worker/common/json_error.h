// What was wrong with JSON read from a file, said without the file's bytes. nlohmann's parse
// errors quote the last bytes read ("last read: 'root:$6$…'") and its overflow errors the number,
// so a reason built from e.what() would put a file's contents (train.init_from = /etc/shadow) into
// logs and trial reasons that the controller serves; the kind of error and its byte offset are
// enough to find the fault.
// Thread-safety: a pure function.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace precon::worker {

inline std::string json_error_text(const nlohmann::json::exception& e) {
  if (const auto* p = dynamic_cast<const nlohmann::json::parse_error*>(&e))
    return "a syntax error at byte " + std::to_string(p->byte);
  if (dynamic_cast<const nlohmann::json::out_of_range*>(&e) != nullptr && (e.id == 406 || e.id == 407))
    return "a number out of range";
  // The others (a wrong type, a missing key) name only JSON types and the keys the reader asked
  // for; their "[json.exception.type_error.302] " prefix is nlohmann's, not the reader's.
  const std::string what = e.what();
  const size_t end = what.rfind("] ", what.find(' '));
  return end == std::string::npos ? what : what.substr(end + 2);
}

}  // namespace precon::worker
