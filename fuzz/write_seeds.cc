// Writes the seed corpora (fuzz/corpus/{packet,control}); run once by hand
// when the formats change: write_seeds fuzz/corpus
#include <fstream>
#include <string>
#include <vector>

#include "switchml/control.pb.h"
#include "transport/ethernet/frames.h"
#include "wire/wire_format.h"

using namespace switchml;

void Write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "fuzz/corpus";
  int n = 0;
  for (uint8_t type : {1, 2, 3}) {
    for (uint16_t count : {0, 1, 32, 64}) {
      PacketHeader h;
      h.type = MessageType(type);
      h.job = type == 3 ? 12 : 7;
      h.rank = uint16_t(n % 4);
      h.slot = uint16_t(n % 9);
      h.chunk = uint32_t(n);
      h.element_count = count;
      h.version = n % 2;
      h.next_exponent = int16_t(n - 5);
      std::string b(PacketBytes(count), '\0');
      EncodeHeader(h, std::span(reinterpret_cast<uint8_t*>(b.data()), b.size()));
      for (size_t i = kHeaderBytes; i < b.size(); ++i) b[i] = char(i * 13);
      Write(dir + "/packet/seed" + std::to_string(n++), b);
    }
  }
  // A rack switch's share (job 9, ranks 0 and 2) and its upstream's results
  // (job 20, to member 1 or to all).
  for (int i = 0; i < 4; ++i) {
    PacketHeader h;
    h.type = i < 2 ? MessageType::kContribution : MessageType::kResult;
    h.job = i < 2 ? 9 : 20;
    h.rank = i == 0 ? 0 : i == 1 ? 2 : i == 2 ? 1 : kAllRanks;
    h.slot = 1;
    h.chunk = 3;
    h.element_count = 32;
    std::string b(PacketBytes(32), '\0');
    EncodeHeader(h, std::span(reinterpret_cast<uint8_t*>(b.data()), b.size()));
    for (size_t j = kHeaderBytes; j < b.size(); ++j) b[j] = char(j * 7);
    Write(dir + "/packet/tree" + std::to_string(i), b);
  }
  // Probes (header only) of job 7's ranks, into both versions of slot 1.
  for (int i = 0; i < 3; ++i) {
    PacketHeader h;
    h.type = MessageType::kProbe;
    h.job = 7;
    h.rank = uint16_t(i);
    h.slot = 1;
    h.chunk = 3;
    h.version = uint8_t(i % 2);
    std::string b(kHeaderBytes, '\0');
    EncodeHeader(h, std::span(reinterpret_cast<uint8_t*>(b.data()), b.size()));
    Write(dir + "/packet/probe" + std::to_string(i), b);
  }
  // Ethernet frames as the AF_XDP endpoint receives them: a switchml packet
  // in IPv4/UDP (the packet fuzzer parses every input as a frame too).
  for (int i = 0; i < 2; ++i) {
    PacketHeader h;
    h.type = MessageType::kContribution;
    h.job = 7;
    h.rank = uint16_t(i);
    h.element_count = 32;
    std::vector<uint8_t> f(transport::ethernet::kHeaderBytes + PacketBytes(32));
    EncodeHeader(h, std::span(f).subspan(transport::ethernet::kHeaderBytes));
    transport::ethernet::FrameAddresses a;
    a.source_mac = {2, 0, 0, 0, 0, uint8_t(10 + i)};
    a.dest_mac = {2, 0, 0, 0, 0, 1};
    a.source.sin_addr.s_addr = htonl(0x0a620000u + 10 + uint32_t(i));
    a.dest.sin_addr.s_addr = htonl(0x0a620001u);
    a.source.sin_port = htons(uint16_t(40000 + i));
    a.dest.sin_port = htons(48864);
    transport::ethernet::WriteHeaders(f, PacketBytes(32), a, uint16_t(i));
    Write(dir + "/packet/frame" + std::to_string(i), std::string(f.begin(), f.end()));
  }
  std::string sequence;
  for (int i = 0; i < 6; ++i) {
    control::v1::JoinRequest r;
    r.set_protocol_version(kWireVersion);
    r.set_job_name(i < 3 ? "a" : "b");
    r.set_rank(uint32_t(i % 3));
    r.set_world_size(3);
    r.add_data_addresses("10.0.0." + std::to_string(i + 1) + ":4000");
    r.set_elements_per_packet(256);
    r.set_pool_slots(i < 3 ? 32 : 40);
    const std::string bytes = r.SerializeAsString();
    Write(dir + "/control/seed" + std::to_string(i), std::string(1, char(bytes.size())) + bytes);
    sequence += std::string(1, char(bytes.size())) + bytes;
  }
  Write(dir + "/control/sequence", sequence);
  return 0;
}
