// Fuzz target for what `dynemb train` reads and computes from untrusted numbers: the libsvm /
// libffm / Criteo line parsers and the metrics (AUC, log loss, running AUC) on scores with NaN,
// +-inf, denormals and overflowing values. Checks that nothing hangs or hits undefined behaviour
// (run it under -fsanitize=undefined,address) and that results keep their invariants.
// Input: a mode byte, then either a text line (parsers) or raw float bits (metrics).
// Build and run: docs/train.md, "Fuzzing the readers and metrics".
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "dynemb/core/error.hpp"
#include "train/metrics.hpp"
#include "train/text_readers.hpp"

namespace {

using namespace dynemb::train;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

void fuzz_parser(uint8_t mode, const char* text, size_t size) {
  const std::string line(text, size);
  SampleBatch batch;
  try {
    if (mode == 0) parse_libsvm_line(line, batch, "fuzz:1");
    if (mode == 1) parse_libffm_line(line, batch, "fuzz:1");
    if (mode == 2) parse_criteo_line(line, batch, "fuzz:1");
  } catch (const dynemb::InvalidArgument&) {
    check(batch.size() == 0);  // a refused line adds no sample
    return;
  }
  check(batch.size() == 1);
  check(batch.labels[0] == 0.0f || batch.labels[0] == 1.0f);
  for (float v : batch.values) check(std::isfinite(v));
}

void fuzz_metrics(const uint8_t* data, size_t size) {
  const size_t n = size / 5;  // 4 bytes of float score, 1 byte of label per pair
  std::vector<float> scores(n), labels(n);
  uint64_t nans = 0;
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(&scores[i], data + 5 * i, 4);
    labels[i] = static_cast<float>(data[5 * i + 4] & 1);
    nans += std::isnan(scores[i]) ? 1 : 0;
  }
  uint64_t counted = 0, counted_ll = 0;
  const double auc = roc_auc(scores, labels, &counted);
  check(counted == nans);
  check(std::isnan(auc) || (auc >= 0.0 && auc <= 1.0));
  const double ll = log_loss(scores, labels, &counted_ll);
  check(counted_ll == nans);
  check(std::isnan(ll) == (nans == n));
  check(std::isnan(ll) || ll >= 0.0);
  RunningAuc running(1 + (size % 97));
  for (size_t i = 0; i < n; i += 7) {
    const size_t chunk = n - i < 7 ? n - i : 7;
    running.add(scores.data() + i, labels.data() + i, chunk);
    const double r = running.value();
    check(std::isnan(r) || (r >= 0.0 && r <= 1.0));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0] % 4;
  if (mode < 3) {
    fuzz_parser(mode, reinterpret_cast<const char*>(data + 1), size - 1);
  } else {
    fuzz_metrics(data + 1, size - 1);
  }
  return 0;
}
