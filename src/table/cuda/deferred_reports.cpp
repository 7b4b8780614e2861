#include "cuda/deferred_reports.hpp"

#include "dynemb/core/cuda/check.hpp"
#include "dynemb/core/cuda/device_guard.hpp"

namespace dynemb::table::cuda {

DeferredReports::DeferredReports(Emit emit) : emit_(std::move(emit)) {
  core::cuda::check(cudaGetDevice(&device_), "cudaGetDevice (deferred reports)");
  core::cuda::check(cudaMallocHost(reinterpret_cast<void**>(&pinned_), kSlots * sizeof(CallState)),
                    "cudaMallocHost (deferred reports)");
  for (size_t i = 0; i < kSlots; ++i) {
    slots_[i].host = pinned_ + i;
    core::cuda::check(cudaEventCreateWithFlags(&slots_[i].landed, cudaEventDisableTiming),
                      "cudaEventCreate (deferred reports)");
  }
}

DeferredReports::~DeferredReports() {
  core::cuda::DeviceGuard device(device_);
  try {
    poll();
  } catch (...) {
  }
  for (Slot& slot : slots_) {
    if (slot.landed != nullptr) cudaEventDestroy(slot.landed);
  }
  if (pinned_ != nullptr) cudaFreeHost(pinned_);
}

void DeferredReports::enqueue(const char* call, const CallState* state, cudaStream_t stream) {
  Landed landed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    take_landed(landed);
    if (count_ == kSlots) {
      core::cuda::check(cudaEventSynchronize(slots_[first_].landed),
                        "cudaEventSynchronize (report)");
      pop_oldest(landed);
    }
    Slot& slot = slots_[(first_ + count_) % kSlots];
    core::cuda::check(
        cudaMemcpyAsync(slot.host, state, sizeof(CallState), cudaMemcpyDeviceToHost, stream),
        "cudaMemcpyAsync (deferred report)");
    core::cuda::check(cudaEventRecord(slot.landed, stream), "cudaEventRecord (deferred report)");
    slot.call = call;
    ++count_;
  }
  emit(landed);
}

void DeferredReports::poll() {
  Landed landed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    take_landed(landed);
  }
  emit(landed);
}

void DeferredReports::flush() {
  Landed landed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    while (count_ > 0) {
      core::cuda::check(cudaEventSynchronize(slots_[first_].landed),
                        "cudaEventSynchronize (report)");
      pop_oldest(landed);
    }
  }
  emit(landed);
}

void DeferredReports::take_landed(Landed& out) {
  while (count_ > 0) {
    const cudaError_t e = cudaEventQuery(slots_[first_].landed);
    if (e == cudaErrorNotReady) return;
    core::cuda::check(e, "cudaEventQuery (deferred report)");
    pop_oldest(out);
  }
}

void DeferredReports::pop_oldest(Landed& out) {
  Slot& slot = slots_[first_];
  out.emplace_back(std::move(slot.call), *slot.host);
  first_ = (first_ + 1) % kSlots;
  --count_;
}

void DeferredReports::emit(const Landed& landed) const {
  for (const auto& [call, state] : landed) emit_(call, state);
}

}  // namespace dynemb::table::cuda
