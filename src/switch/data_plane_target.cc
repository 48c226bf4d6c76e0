#include "switch/data_plane_target.h"

namespace switchml {

Status DataPlaneTarget::CheckJoin(const ParsedJoin&) const { return Status::Ok(); }

std::vector<sockaddr_in> DataPlaneTarget::ResultGroups(const JobAssignment&, uint16_t) const {
  return {};
}

}  // namespace switchml
