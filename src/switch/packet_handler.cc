#include "switch/packet_handler.h"

#include <algorithm>

#include "common/thread_split.h"
#include "net/address.h"

namespace switchml {

PacketHandler::PacketHandler(DataPlane* data_plane, uint16_t shard, uint16_t shards)
    : data_plane_(data_plane),
      shard_(shard),
      shards_(shards),
      books_(data_plane->config().max_jobs) {}

void PacketHandler::Install(JobId id, uint16_t world_size, uint16_t pool_slots, uint16_t threads,
                            std::vector<sockaddr_in> addresses,
                            const std::optional<net::PacketAuthenticator>& auth,
                            std::vector<sockaddr_in> result_groups,
                            std::optional<UpstreamRoute> upstream) {
  Book& b = books_[id.value() % books_.size()];
  b.active = true;
  b.id = id.value();
  b.world_size = world_size;
  b.threads = threads;
  b.thread_of_slot.resize(pool_slots);
  for (uint32_t s = 0; s < pool_slots; ++s) {
    b.thread_of_slot[s] = uint16_t(ThreadOf(s, pool_slots, threads));
  }
  b.addresses = std::move(addresses);
  b.auth = auth;
  b.result_groups = std::move(result_groups);
  b.upstream = std::move(upstream);
  const size_t index = size_t(&b - books_.data());
  upstream_books_.erase(std::remove(upstream_books_.begin(), upstream_books_.end(), index),
                        upstream_books_.end());
  if (b.upstream) upstream_books_.push_back(index);
}

void PacketHandler::Remove(JobId id) {
  Book& b = books_[id.value() % books_.size()];
  if (b.id == id.value()) b.active = false;
}

bool PacketHandler::Installed(JobId id) const {
  const Book& b = books_[id.value() % books_.size()];
  return b.active && b.id == id.value();
}

bool PacketHandler::Handle(std::span<const uint8_t> packet, const sockaddr_in& source,
                           std::span<uint8_t> out, ReplySink& sink) {
  // Longer than any packet this switch takes (with coalesced receives the
  // buffer no longer cuts it short): malformed, as a cut one would be.
  if (packet.size() > MaxPacketBytes(data_plane_->config().max_elements_per_packet)) {
    data_plane_->CountDecodeError(DecodeError::kLengthMismatch);
    return false;
  }
  PacketView view;
  if (const DecodeError e = DecodePacket(packet, &view); e != DecodeError::kOk) {
    data_plane_->CountDecodeError(e);
    return false;
  }
  const PacketHeader& h = view.header;
  const bool to_switch = h.type == MessageType::kContribution || h.type == MessageType::kProbe;
  Book* found = &books_[h.job % books_.size()];
  if (!found->active || found->id != h.job) {
    // A result or pending reply of an upstream switch carries its own job id.
    found = to_switch ? nullptr : FindByUpstream(h.job);
    if (found != nullptr) {
      Book& book = *found;
      const uint16_t thread = h.slot < book.thread_of_slot.size() ? book.thread_of_slot[h.slot] : 0;
      if (!net::SameAddress(book.upstream->addresses[thread], source) ||
          thread % shards_ != shard_) {
        data_plane_->CountDroppedPacket(book.id, DropReason::kSourceMismatch);
        return false;
      }
      if (book.upstream->auth && !book.upstream->auth->Verify(packet)) {
        data_plane_->CountDroppedPacket(book.id, DropReason::kBadMac);
        return false;
      }
      const Verdict v = data_plane_->ProcessDecoded(view, out);
      if (v.action == Action::kDrop) return false;
      Deliver(book, thread, v, nullptr, out, sink);
      return true;
    }
    // Also a job the data plane already runs but whose book is not installed
    // yet: without the book neither the source nor the MAC can be checked.
    data_plane_->CountDroppedPacket(
        h.job, to_switch ? DropReason::kUnknownJob : DropReason::kNotContribution);
    return false;
  }
  Book& book = *found;
  // Rank and slot out of range are the data plane's to count.
  const bool addressable = h.rank < book.world_size && h.slot < book.thread_of_slot.size();
  // Only the registered socket of (rank, thread owning the slot) may speak
  // for that rank; everything else is counted and dropped.
  const uint16_t thread = addressable ? book.thread_of_slot[h.slot] : 0;
  const sockaddr_in* rank_address =
      addressable ? &book.addresses[size_t(h.rank) * book.threads + thread] : nullptr;
  // ... and only to the shard that serves that thread.
  if (addressable && (!net::SameAddress(*rank_address, source) || thread % shards_ != shard_)) {
    data_plane_->CountDroppedPacket(h.job, DropReason::kSourceMismatch);
    return false;
  }
  if (addressable && book.auth && !book.auth->Verify(packet)) {
    data_plane_->CountDroppedPacket(h.job, DropReason::kBadMac);
    return false;
  }
  const Verdict v = data_plane_->ProcessDecoded(view, out);
  if (v.action == Action::kDrop || !addressable) return false;
  Deliver(book, thread, v, rank_address, out, sink);
  return true;
}

void PacketHandler::Deliver(Book& book, uint16_t thread, const Verdict& v,
                            const sockaddr_in* sender, std::span<uint8_t> out, ReplySink& sink) {
  if (v.action == Action::kSendUpstream) {
    auto& auth = book.upstream->auth;
    const size_t length = auth ? auth->Sign(out.data(), v.out_bytes) : v.out_bytes;
    sink.Send(std::span<const uint8_t>(out.data(), length), book.upstream->addresses[thread]);
    return;
  }
  const size_t length = book.auth ? book.auth->Sign(out.data(), v.out_bytes) : v.out_bytes;
  const std::span<const uint8_t> reply(out.data(), length);
  if (v.action == Action::kNackToMissing) {
    // To the ranks the bitmaps name (all served here: the data plane names
    // no others).
    for (uint16_t r = 0; r < v.world_size; ++r) {
      if (!NackNames(out, r)) continue;
      const sockaddr_in& to = book.addresses[size_t(r) * book.threads + thread];
      if (to.sin_port != 0) sink.Send(reply, to);
    }
  } else if (v.action == Action::kSendToAll) {
    for (uint8_t copy = 0; copy < v.copies; ++copy) {
      if (!book.result_groups.empty()) {
        sink.Send(reply, book.result_groups[thread]);
        continue;
      }
      // In a tree the book has addresses for the ranks served here only; the
      // others' entries stay unset.
      for (uint16_t r = 0; r < v.world_size; ++r) {
        const sockaddr_in& to = book.addresses[size_t(r) * book.threads + thread];
        if (to.sin_port != 0) sink.Send(reply, to);
      }
    }
  } else if (sender != nullptr) {
    sink.Send(reply, *sender);
  }
}

PacketHandler::Book* PacketHandler::FindByUpstream(uint32_t upstream_job) {
  for (size_t i : upstream_books_) {
    Book& b = books_[i];
    if (b.active && b.upstream->job.value() == upstream_job) return &b;
  }
  return nullptr;
}

bool PacketHandler::SendTimerPacket(Nanos now, std::span<uint8_t> out, ReplySink& sink) {
  const Verdict v = data_plane_->NextTimerPacket(now, out);
  if (v.action == Action::kDrop) return false;
  Book& book = books_[v.job % books_.size()];
  // A job whose book is gone (or not yet there): nothing to address, but
  // the data plane may have more.
  if (!book.active || book.id != v.job) return true;
  if (v.action == Action::kSendUpstream && !book.upstream) return true;
  Deliver(book, book.thread_of_slot[v.slot], v, nullptr, out, sink);
  return true;
}

}  // namespace switchml
