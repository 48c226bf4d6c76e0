// The client library's log, apart from the switch daemon's: the logger
// "switchml" on stderr, at the level SWITCHML_LOG_LEVEL names (trace, debug,
// info, warn, error, critical, off; default warn, so a training job's output
// stays clean, as NCCL's does without NCCL_DEBUG). What each level adds:
//   info   once per Context: what it chose (switch, transport, packet size,
//          window, slots, threads, multicast, authentication); a warning on
//          sustained retransmission
//   debug  one line per operation and I/O thread
//   trace  per-packet decisions (a branch per packet when off)
#pragma once

#include <spdlog/spdlog.h>

#include <optional>
#include <string>

namespace switchml {

spdlog::logger& ClientLog();

// Log level names, case-insensitively ("warning" too); nullopt if unknown.
std::optional<spdlog::level::level_enum> ParseLogLevel(std::string name);

}  // namespace switchml
