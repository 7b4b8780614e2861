// libFuzzer target for the checkpoint reader: the manifest parser and checker, the data-file
// header decoder, and verification and row reading of every shard, on arbitrary bytes.
// Input: manifest text, a NUL byte, then the bytes served for every data file.
// Build and run: docs/checkpoint_format.md, "Fuzzing the reader".
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/shard_reader.hpp"
#include "dynemb/checkpoint/format.hpp"

namespace ckpt = dynemb::checkpoint;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\0');
  const std::string manifest_text(input.substr(0, split));
  const std::string files(split == std::string_view::npos ? std::string_view{}
                                                          : input.substr(split + 1));
  if (files.size() >= ckpt::kHeaderBytes) {
    try {
      ckpt::decode_header(reinterpret_cast<const uint8_t*>(files.data()), "fuzz");
    } catch (const ckpt::CheckpointError&) {
    }
  }
  try {
    // The manifest's own checksum is checked, then the parser explored past it (a fuzzer
    // rarely forges a CRC).
    (void)ckpt::manifest_checksum_problem(manifest_text);
    const ckpt::Manifest m =
        ckpt::manifest_from_json(manifest_text, "fuzz manifest", /*check_own_checksum=*/false);
    // Writing it back must parse to the same tables.
    const ckpt::Manifest again = ckpt::manifest_from_json(ckpt::manifest_to_json(m), "rewritten");
    if (again.tables.size() != m.tables.size()) __builtin_trap();
    auto source = ckpt::open_memory_checkpoint(manifest_text, files);
    try {
      ckpt::check_file_sizes(*source, m);
      ckpt::verify_files(*source, m);
    } catch (const ckpt::CheckpointError&) {
    }
    // Read rows of every shard whatever the checks said (bounded work per input).
    for (const ckpt::TableEntry& t : m.tables) {
      for (const ckpt::ShardEntry& s : t.shards) {
        try {
          ckpt::ShardReader reader(*source, t, s, m.world_size, true);
          const size_t stride = size_t{t.dim} + (t.has_optimizer_state ? t.optimizer_state_dim : 0);
          const size_t n = static_cast<size_t>(std::min<uint64_t>(reader.remaining(), 4));
          if (stride * n > (1u << 20)) continue;
          std::vector<uint64_t> keys(n), scores(n);
          std::vector<float> rows(stride * n);
          reader.read(n, keys.data(), rows.data(), stride, scores.data());
          if (reader.remaining() == 0) reader.finish();
        } catch (const ckpt::CheckpointError&) {
        }
      }
    }
  } catch (const ckpt::CheckpointError&) {
  }
  return 0;
}
