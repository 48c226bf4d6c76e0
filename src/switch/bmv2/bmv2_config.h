// How the switch daemon reaches a BMv2 switch: serve jobs from
// simple_switch running p4/v1model/switchml.p4 instead of this process's
// software data plane. The daemon then only runs the control plane;
// p4/README.md shows a setup.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace switchml::bmv2 {

struct Bmv2Config {
  // The runtime CLI and its arguments; --thrift-port is appended.
  std::vector<std::string> cli = {"simple_switch_CLI"};
  uint16_t thrift_port = 9090;
  std::string hosts_file;             // TOML list of the hosts behind the switch's ports
  std::string switch_ip;              // the aggregation endpoint that workers send to
  std::string switch_mac;             // its MAC address
  uint16_t elements_per_packet = 64;  // SWITCHML_K the program was compiled with
  uint32_t pool_slots = 512;          // SWITCHML_POOL_SLOTS of the program
};

}  // namespace switchml::bmv2
