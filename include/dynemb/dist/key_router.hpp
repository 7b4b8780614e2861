// Which rank owns a key of a sharded table: a hash of the key (the default, the same rank the
// checkpoint loader routes to), key % world (SparseOperationKit's rule), or the caller's rule.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace dynemb::dist {

class KeyRouter {
 public:
  // owner(table index, key bits, world size) -> rank in [0, world size).
  using Rule = std::function<uint32_t(uint32_t table, uint64_t key_bits, uint32_t world)>;

  // rank_of_key_bits (core/hash.hpp): spreads any key set evenly.
  static KeyRouter hash();
  // key bits % world: SparseOperationKit's placement (keys as unsigned 64-bit).
  static KeyRouter modulo();
  // The caller's rule, named (the name is what ranks compare to agree on the rule). A result
  // outside [0, world) is an InvalidArgument when the key is routed.
  static KeyRouter custom(std::string name, Rule rule);

  // The owner of `key_bits` of table `table` among `world` ranks.
  uint32_t owner(uint32_t table, uint64_t key_bits, uint32_t world) const;
  // "hash", "modulo" or "custom:<name>".
  const std::string& name() const { return name_; }

  enum class Kind : uint8_t { kHash, kModulo, kCustom };
  // Which rule: hash and modulo can also be evaluated on a GPU, a custom rule only here.
  Kind kind() const { return kind_; }

 private:
  KeyRouter(Kind kind, std::string name, Rule rule)
      : kind_(kind), name_(std::move(name)), rule_(std::move(rule)) {}
  Kind kind_;
  std::string name_;
  Rule rule_;
};

}  // namespace dynemb::dist
