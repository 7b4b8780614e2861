// The key -> owner rank rules.
#include "dynemb/dist/key_router.hpp"

#include "dynemb/core/error.hpp"
#include "dynemb/core/hash.hpp"

namespace dynemb::dist {

KeyRouter KeyRouter::hash() {
  return KeyRouter(Kind::kHash, "hash", nullptr);
}

KeyRouter KeyRouter::modulo() {
  return KeyRouter(Kind::kModulo, "modulo", nullptr);
}

KeyRouter KeyRouter::custom(std::string name, Rule rule) {
  require(static_cast<bool>(rule), "KeyRouter::custom", "rule", "empty function", "a function");
  require(!name.empty(), "KeyRouter::custom", "name", "\"\"",
          "a name the ranks compare to agree on the rule");
  return KeyRouter(Kind::kCustom, "custom:" + name, std::move(rule));
}

uint32_t KeyRouter::owner(uint32_t table, uint64_t key_bits, uint32_t world) const {
  switch (kind_) {
    case Kind::kHash:
      return rank_of_key_bits(key_bits, world);
    case Kind::kModulo:
      return static_cast<uint32_t>(key_bits % world);
    case Kind::kCustom:
    default: {
      const uint32_t r = rule_(table, key_bits, world);
      if (r >= world) {
        throw InvalidArgument("KeyRouter " + name_ + ": owner of key " + std::to_string(key_bits) +
                              " (table " + std::to_string(table) + ") = " + std::to_string(r) +
                              ", must be < world size " + std::to_string(world));
      }
      return r;
    }
  }
}

}  // namespace dynemb::dist
