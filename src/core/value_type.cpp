#include "dynemb/core/value_type.hpp"

#include "dynemb/core/error.hpp"

namespace dynemb {

std::string to_string(ValueType type) {
  switch (type) {
    case ValueType::kFloat32:
      return "float32";
    case ValueType::kFloat16:
      return "float16";
    case ValueType::kBFloat16:
      return "bfloat16";
  }
  return "value_type(" + std::to_string(static_cast<int>(type)) + ")";
}

ValueType parse_value_type(const std::string& name, const char* where, const char* argument) {
  if (name == "float32" || name == "fp32") return ValueType::kFloat32;
  if (name == "float16" || name == "fp16") return ValueType::kFloat16;
  if (name == "bfloat16" || name == "bf16") return ValueType::kBFloat16;
  throw InvalidArgument(std::string(where) + ": " + argument + " = '" + name +
                        "' is not a value type; allowed: float32 (fp32), float16 (fp16), "
                        "bfloat16 (bf16)");
}

}  // namespace dynemb
