#include "client/client_log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>

namespace switchml {

std::optional<spdlog::level::level_enum> ParseLogLevel(std::string name) {
  using spdlog::level::level_enum;
  static constexpr std::pair<const char*, level_enum> kLevels[] = {
      {"trace", level_enum::trace},       {"debug", level_enum::debug},  {"info", level_enum::info},
      {"warn", level_enum::warn},         {"warning", level_enum::warn}, {"error", level_enum::err},
      {"critical", level_enum::critical}, {"off", level_enum::off}};
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  for (const auto& [text, level] : kLevels) {
    if (name == text) return level;
  }
  return std::nullopt;
}

spdlog::logger& ClientLog() {
  static const std::shared_ptr<spdlog::logger> log = [] {
    auto logger = std::make_shared<spdlog::logger>(
        "switchml", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    spdlog::level::level_enum level = spdlog::level::warn;
    if (const char* env = std::getenv("SWITCHML_LOG_LEVEL")) {
      if (auto parsed = ParseLogLevel(env)) {
        level = *parsed;
      } else {
        logger->warn(
            "SWITCHML_LOG_LEVEL='{}' is not trace, debug, info, warn, error, critical "
            "or off; using warn",
            std::string(env).substr(0, 32));
      }
    }
    logger->set_level(level);
    logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [switchml %l] %v");
    return logger;
  }();
  return *log;
}

}  // namespace switchml
