#include "ops/side_streams.hpp"

#include "ops/backends.hpp"

namespace dynemb::detail {

SideStreams::SideStreams(Backend backend, size_t count, int device) : device_(device) {
  if (backend != Backend::kCuda || count == 0) return;
  for (size_t i = 0; i < count; ++i) {
    streams_.push_back(create_stream_cuda(device));
    events_.push_back(create_event_cuda(device));
  }
  events_.push_back(create_event_cuda(device));
}

SideStreams::~SideStreams() {
  for (void* e : events_) destroy_event_cuda(e, device_);
  for (StreamHandle s : streams_) destroy_stream_cuda(s, device_);
}

void SideStreams::fork(StreamHandle main) {
  if (streams_.empty()) return;
  void* forked = events_.back();
  record_event_cuda(forked, main, device_);
  for (StreamHandle s : streams_) wait_event_cuda(s, forked, device_);
}

void SideStreams::join(StreamHandle main) {
  for (size_t i = 0; i < streams_.size(); ++i) {
    record_event_cuda(events_[i], streams_[i], device_);
    wait_event_cuda(main, events_[i], device_);
  }
}

}  // namespace dynemb::detail
