// The data files' typed header and the names of contents and dtypes.
#include <cstring>

#include "crc32c.hpp"
#include "dynemb/checkpoint/format.hpp"

namespace dynemb::checkpoint {
namespace {

// Header layout (little-endian): see docs/checkpoint_format.md.
constexpr size_t kVersionAt = 8, kHeaderBytesAt = 12, kContentAt = 16, kDtypeAt = 17,
                 kElementBytesAt = 18, kWidthAt = 20, kRowsAt = 24, kRankAt = 32, kWorldSizeAt = 36,
                 kCrcAt = 60;

template <class T>
void put(uint8_t* out, size_t at, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out[at + i] = static_cast<uint8_t>(uint64_t(v) >> (8 * i));
}

template <class T>
T get(const uint8_t* in, size_t at) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= uint64_t(in[at + i]) << (8 * i);
  return static_cast<T>(v);
}

}  // namespace

std::string to_string(FileContent content) {
  switch (content) {
    case FileContent::kKeys:
      return "keys";
    case FileContent::kValues:
      return "values";
    case FileContent::kScores:
      return "scores";
    case FileContent::kOptimizerState:
      return "optimizer_state";
  }
  return "content " + std::to_string(static_cast<int>(content));
}

std::string to_string(Dtype dtype) {
  switch (dtype) {
    case Dtype::kInt64:
      return "int64";
    case Dtype::kUint64:
      return "uint64";
    case Dtype::kFloat32:
      return "float32";
    case Dtype::kFloat16:
      return "float16";
    case Dtype::kBFloat16:
      return "bfloat16";
  }
  return "dtype " + std::to_string(static_cast<int>(dtype));
}

Dtype parse_dtype(std::string_view name, const std::string& where) {
  if (name == "int64") return Dtype::kInt64;
  if (name == "uint64") return Dtype::kUint64;
  if (name == "float32") return Dtype::kFloat32;
  if (name == "float16") return Dtype::kFloat16;
  if (name == "bfloat16") return Dtype::kBFloat16;
  throw CheckpointError(where + ": dtype = \"" + std::string(name) +
                        "\", expected int64, uint64, float32, float16 or bfloat16");
}

uint32_t dtype_bytes(Dtype dtype) {
  switch (dtype) {
    case Dtype::kFloat32:
      return 4;
    case Dtype::kFloat16:
    case Dtype::kBFloat16:
      return 2;
    default:
      return 8;
  }
}

Dtype dtype_of(ValueType type) {
  switch (type) {
    case ValueType::kFloat16:
      return Dtype::kFloat16;
    case ValueType::kBFloat16:
      return Dtype::kBFloat16;
    default:
      return Dtype::kFloat32;
  }
}

ValueType value_type_of(Dtype dtype) {
  switch (dtype) {
    case Dtype::kFloat16:
      return ValueType::kFloat16;
    case Dtype::kBFloat16:
      return ValueType::kBFloat16;
    default:
      return ValueType::kFloat32;
  }
}

void encode_header(const FileHeader& h, uint8_t out[kHeaderBytes]) {
  std::memset(out, 0, kHeaderBytes);
  std::memcpy(out, kFileMagic, sizeof kFileMagic);
  put<uint32_t>(out, kVersionAt, h.format_version);
  put<uint32_t>(out, kHeaderBytesAt, kHeaderBytes);
  put<uint8_t>(out, kContentAt, static_cast<uint8_t>(h.content));
  put<uint8_t>(out, kDtypeAt, static_cast<uint8_t>(h.dtype));
  put<uint16_t>(out, kElementBytesAt, static_cast<uint16_t>(dtype_bytes(h.dtype)));
  put<uint32_t>(out, kWidthAt, h.width);
  put<uint64_t>(out, kRowsAt, h.rows);
  put<uint32_t>(out, kRankAt, h.rank);
  put<uint32_t>(out, kWorldSizeAt, h.world_size);
  put<uint32_t>(out, kCrcAt, crc32c(out, kCrcAt));
}

FileHeader decode_header(const uint8_t in[kHeaderBytes], const std::string& file) {
  if (std::memcmp(in, kFileMagic, sizeof kFileMagic) != 0) {
    throw CheckpointError(file + ": not a dynemb checkpoint file (magic is not \"DYNEMBCK\")");
  }
  const uint32_t stored_crc = get<uint32_t>(in, kCrcAt);
  const uint32_t actual_crc = crc32c(in, kCrcAt);
  if (stored_crc != actual_crc) {
    throw CheckpointError(file + ": header checksum mismatch (stored " +
                          std::to_string(stored_crc) + ", computed " + std::to_string(actual_crc) +
                          "): the header is corrupt");
  }
  FileHeader h;
  h.format_version = get<uint32_t>(in, kVersionAt);
  if (h.format_version != kFormatVersion) {
    throw CheckpointError(file + ": format_version = " + std::to_string(h.format_version) +
                          ", this build reads version " + std::to_string(kFormatVersion));
  }
  const uint32_t header_bytes = get<uint32_t>(in, kHeaderBytesAt);
  if (header_bytes != kHeaderBytes) {
    throw CheckpointError(file + ": header_bytes = " + std::to_string(header_bytes) +
                          ", expected " + std::to_string(kHeaderBytes));
  }
  const uint8_t content = get<uint8_t>(in, kContentAt);
  const uint8_t dtype = get<uint8_t>(in, kDtypeAt);
  if (content < 1 || content > 4) {
    throw CheckpointError(file + ": content = " + std::to_string(content) + ", expected 1..4");
  }
  if (dtype < 1 || dtype > 5) {
    throw CheckpointError(file + ": dtype = " + std::to_string(dtype) + ", expected 1..5");
  }
  h.content = static_cast<FileContent>(content);
  h.dtype = static_cast<Dtype>(dtype);
  const uint16_t element_bytes = get<uint16_t>(in, kElementBytesAt);
  if (element_bytes != dtype_bytes(h.dtype)) {
    throw CheckpointError(file + ": element_bytes = " + std::to_string(element_bytes) + ", " +
                          to_string(h.dtype) + " has " + std::to_string(dtype_bytes(h.dtype)));
  }
  h.width = get<uint32_t>(in, kWidthAt);
  h.rows = get<uint64_t>(in, kRowsAt);
  h.rank = get<uint32_t>(in, kRankAt);
  h.world_size = get<uint32_t>(in, kWorldSizeAt);
  return h;
}

}  // namespace dynemb::checkpoint
