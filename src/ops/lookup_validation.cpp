#include <string>

#include "dynemb/core/error.hpp"
#include "ops/backends.hpp"

namespace dynemb::detail {

void validate_lookup_host(const char* where, std::span<const LookupFeature> features,
                          std::span<const LookupOutput> outputs, const char* outputs_name) {
  require(outputs.size() == features.size(), where, outputs_name,
          std::to_string(outputs.size()) + " entries",
          "must have one per feature (" + std::to_string(features.size()) + ")");
  for (size_t f = 0; f < features.size(); ++f) {
    const LookupFeature& x = features[f];
    const std::string name = "features[" + std::to_string(f) + "].";
    auto arg = [&](const char* field) { return name + field; };
    require(x.dim > 0, where, arg("dim").c_str(), std::to_string(x.dim), "must be > 0");
    require(x.row_stride >= x.dim, where, arg("row_stride").c_str(), std::to_string(x.row_stride),
            "must be >= dim (" + std::to_string(x.dim) + ")");
    require(outputs[f].out_stride >= x.dim, where,
            (std::string(outputs_name) + "[" + std::to_string(f) + "].out_stride").c_str(),
            std::to_string(outputs[f].out_stride),
            "must be >= dim (" + std::to_string(x.dim) + ")");
    require(static_cast<uint8_t>(x.mode) <= static_cast<uint8_t>(PoolingMode::kNone), where,
            arg("mode").c_str(), std::to_string(static_cast<int>(x.mode)),
            "must be sum, mean or none");
    if (x.num_bags == 0) {
      require(x.num_ids == 0, where, arg("num_ids").c_str(), std::to_string(x.num_ids),
              "must be 0 when num_bags = 0");
      continue;
    }
    require(x.offsets != nullptr, where, arg("offsets").c_str(), "nullptr",
            "must be non-null when num_bags = " + std::to_string(x.num_bags));
    require(x.offsets[0] == 0, where, arg("offsets[0]").c_str(), std::to_string(x.offsets[0]),
            "must be 0");
    for (size_t b = 0; b < x.num_bags; ++b) {
      require(x.offsets[b + 1] >= x.offsets[b], where,
              (name + "offsets[" + std::to_string(b + 1) + "]").c_str(),
              std::to_string(x.offsets[b + 1]),
              "must be >= offsets[" + std::to_string(b) + "] (" + std::to_string(x.offsets[b]) +
                  "): offsets must be non-decreasing");
    }
    require(static_cast<size_t>(x.offsets[x.num_bags]) == x.num_ids, where,
            (name + "offsets[" + std::to_string(x.num_bags) + "]").c_str(),
            std::to_string(x.offsets[x.num_bags]),
            "must equal num_ids (" + std::to_string(x.num_ids) + "): the last offset ends the ids");
    const int64_t num_ids = static_cast<int64_t>(x.num_ids);
    if (num_ids == 0) continue;
    require(x.indices != nullptr, where, arg("indices").c_str(), "nullptr",
            "must be non-null when there are " + std::to_string(num_ids) + " ids");
    require(x.rows != nullptr, where, arg("rows").c_str(), "nullptr",
            "must be non-null when there are " + std::to_string(num_ids) + " ids");
    require(outputs[f].out != nullptr, where,
            (std::string(outputs_name) + "[" + std::to_string(f) + "].out").c_str(), "nullptr",
            "must be non-null");
    for (int64_t i = 0; i < num_ids; ++i) {
      require(x.indices[i] < x.num_rows, where,
              (name + "indices[" + std::to_string(i) + "]").c_str(), std::to_string(x.indices[i]),
              "must be < num_rows (" + std::to_string(x.num_rows) + ")");
    }
  }
}

}  // namespace dynemb::detail
