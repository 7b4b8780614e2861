#include <string>

#include "dynemb/core/error.hpp"
#include "lookup_validation.hpp"

namespace dynemb::ops::detail {
namespace {

std::string feature_field(size_t f, const std::string& field) {
  return "features[" + std::to_string(f) + "]." + field;
}

}  // namespace

void validate_lookup_shape(const char* where, std::span<const LookupFeature> features,
                           std::span<const LookupOutput> outputs, const char* outputs_name) {
  require(outputs.size() == features.size(), where, outputs_name,
          std::to_string(outputs.size()) + " entries",
          "must have one per feature (" + std::to_string(features.size()) + ")");
  for (size_t f = 0; f < features.size(); ++f) {
    const LookupFeature& x = features[f];
    const std::string out_name = std::string(outputs_name) + "[" + std::to_string(f) + "].";
    require(x.dim > 0, where, feature_field(f, "dim").c_str(), std::to_string(x.dim),
            "must be > 0");
    require(static_cast<int>(x.value_type) <= static_cast<int>(ValueType::kBFloat16), where,
            feature_field(f, "value_type").c_str(), std::to_string(static_cast<int>(x.value_type)),
            "must be float32, float16 or bfloat16");
    const uint32_t words = value_words(x.value_type, x.dim);
    require(x.row_ptrs != nullptr || x.row_stride >= words, where,
            feature_field(f, "row_stride").c_str(), std::to_string(x.row_stride),
            "must be >= the row's words (" + std::to_string(words) + ": dim " +
                std::to_string(x.dim) + " " + to_string(x.value_type) +
                ") when rows are not given by address");
    const ValueType out_type = outputs[f].type;
    require(out_type == ValueType::kFloat32 || out_type == x.value_type, where,
            (out_name + "type").c_str(), to_string(out_type),
            "must be float32 or the rows' value_type (" + to_string(x.value_type) + ")");
    const uint32_t out_words = value_words(out_type, x.dim);
    require(outputs[f].out_stride >= out_words, where, (out_name + "out_stride").c_str(),
            std::to_string(outputs[f].out_stride),
            "must be >= the output row's words (" + std::to_string(out_words) + ": dim " +
                std::to_string(x.dim) + " " + to_string(out_type) + ")");
    require(static_cast<uint8_t>(x.mode) <= static_cast<uint8_t>(PoolingMode::kNone), where,
            feature_field(f, "mode").c_str(), std::to_string(static_cast<int>(x.mode)),
            "must be sum, mean or none");
    require(x.num_ids <= 0xFFFFFFFFull, where, feature_field(f, "num_ids").c_str(),
            std::to_string(x.num_ids), "must be < 2^32");
    if (x.num_bags == 0) {
      require(x.num_ids == 0, where, feature_field(f, "num_ids").c_str(), std::to_string(x.num_ids),
              "must be 0 when num_bags = 0");
      continue;
    }
    require(x.offsets != nullptr, where, feature_field(f, "offsets").c_str(), "nullptr",
            "must be non-null when num_bags = " + std::to_string(x.num_bags));
    // The output has a row per bag, or per id when nothing is pooled (none: bags may be empty).
    const size_t out_rows = x.mode == PoolingMode::kNone ? x.num_ids : x.num_bags;
    require(out_rows == 0 || outputs[f].out != nullptr, where, (out_name + "out").c_str(),
            "nullptr",
            "must be non-null when the output has " + std::to_string(out_rows) + " rows");
    if (x.num_ids == 0) continue;
    require(x.indices != nullptr, where, feature_field(f, "indices").c_str(), "nullptr",
            "must be non-null when num_ids = " + std::to_string(x.num_ids));
    require(x.rows != nullptr || x.row_ptrs != nullptr, where, feature_field(f, "rows").c_str(),
            "nullptr",
            "must be non-null (or row_ptrs given) when num_ids = " + std::to_string(x.num_ids));
  }
}

void throw_bad_first_offset(const char* where, size_t f, int64_t value) {
  require(false, where, feature_field(f, "offsets[0]").c_str(), std::to_string(value), "must be 0");
  __builtin_unreachable();  // require(false, ...) always throws
}

void throw_bad_last_offset(const char* where, size_t f, size_t num_bags, int64_t value,
                           size_t num_ids) {
  require(false, where, feature_field(f, "offsets[" + std::to_string(num_bags) + "]").c_str(),
          std::to_string(value),
          "must equal num_ids (" + std::to_string(num_ids) + "): the last offset ends the ids");
  __builtin_unreachable();  // require(false, ...) always throws
}

void throw_decreasing_offset(const char* where, size_t f, size_t b, int64_t value,
                             int64_t previous) {
  require(false, where, feature_field(f, "offsets[" + std::to_string(b) + "]").c_str(),
          std::to_string(value),
          "must be >= offsets[" + std::to_string(b - 1) + "] (" + std::to_string(previous) +
              "): offsets must be non-decreasing");
  __builtin_unreachable();  // require(false, ...) always throws
}

void throw_bad_index(const char* where, size_t f, size_t i, uint32_t value, size_t num_rows) {
  require(false, where, feature_field(f, "indices[" + std::to_string(i) + "]").c_str(),
          std::to_string(value), "must be < num_rows (" + std::to_string(num_rows) + ")");
  __builtin_unreachable();  // require(false, ...) always throws
}

void validate_lookup_data_host(const char* where, std::span<const LookupFeature> features) {
  for (size_t f = 0; f < features.size(); ++f) {
    const LookupFeature& x = features[f];
    if (x.num_bags == 0) continue;
    if (x.offsets[0] != 0) throw_bad_first_offset(where, f, x.offsets[0]);
    for (size_t b = 1; b <= x.num_bags; ++b) {
      if (x.offsets[b] < x.offsets[b - 1]) {
        throw_decreasing_offset(where, f, b, x.offsets[b], x.offsets[b - 1]);
      }
    }
    if (static_cast<size_t>(x.offsets[x.num_bags]) != x.num_ids) {
      throw_bad_last_offset(where, f, x.num_bags, x.offsets[x.num_bags], x.num_ids);
    }
    for (size_t i = 0; i < x.num_ids; ++i) {
      if (x.indices[i] >= x.num_rows) throw_bad_index(where, f, i, x.indices[i], x.num_rows);
    }
  }
}

}  // namespace dynemb::ops::detail
