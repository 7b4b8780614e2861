#include "train/train_state.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <random>

#include <nlohmann/json.hpp>

#include "dynemb/core/error.hpp"

namespace dynemb::train {
namespace {

using Json = nlohmann::json;

// The shortest text that reads back as the same value (std::to_chars round trip).
template <typename F>
std::string exact(F v) {
  char buffer[40];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, v);
  return ec == std::errc() ? std::string(buffer, end) : std::to_string(v);
}

std::string describe_value(const Json& v) {
  std::string s = v.dump(-1);
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

[[noreturn]] void bad_field(const std::string& where, const char* field, const Json& value,
                            const std::string& limit) {
  throw InvalidArgument(where + ": field \"" + field + "\" = " + describe_value(value) + ", " +
                        limit);
}

const Json& field(const Json& j, const char* name, const std::string& where) {
  const auto it = j.find(name);
  if (it == j.end()) throw InvalidArgument(where + ": field \"" + name + "\" is missing");
  return *it;
}

uint64_t u64_field(const Json& j, const char* name, const std::string& where, uint64_t lo = 0,
                   uint64_t hi = std::numeric_limits<uint64_t>::max()) {
  const Json& v = field(j, name, where);
  // A negative number is never read as a huge unsigned one.
  if (!v.is_number_unsigned()) bad_field(where, name, v, "expected an unsigned integer");
  const uint64_t x = v.get<uint64_t>();
  if (x < lo || x > hi) {
    bad_field(where, name, v,
              "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return x;
}

std::string string_field(const Json& j, const char* name, const std::string& where) {
  const Json& v = field(j, name, where);
  if (!v.is_string()) bad_field(where, name, v, "expected a string");
  return v.get<std::string>();
}

}  // namespace

std::string new_run_id() {
  std::random_device rd;
  char id[33];
  std::snprintf(id, sizeof id, "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return id;
}

TrainState initial_state(const TrainOptions& o) {
  TrainState s;
  s.run_id = new_run_id();
  s.dim = o.dim;
  s.batch_size = effective_batch_size(o);
  s.optimizer = o.optimizer;
  s.stream.emplace_back("--data", o.data);
  if (o.data == "synthetic") {
    const SyntheticOptions& y = o.synthetic;
    std::string cards;
    for (uint64_t c : y.cardinalities) cards += (cards.empty() ? "" : ",") + std::to_string(c);
    s.stream.emplace_back("--data-seed", std::to_string(y.seed));
    s.stream.emplace_back("--zipf-alpha", exact(y.zipf_alpha));
    s.stream.emplace_back("--active-ids", std::to_string(y.active_ids));
    s.stream.emplace_back("--true-dim", std::to_string(y.true_dim));
    s.stream.emplace_back("--truth-linear-std", exact(y.linear_std));
    s.stream.emplace_back("--truth-factor-std", exact(y.factor_std));
    s.stream.emplace_back("--truth-bias", exact(y.bias));
    s.stream.emplace_back("--start-vocab", exact(y.start_vocab));
    s.stream.emplace_back("--vocab-horizon", std::to_string(y.horizon));
    s.stream.emplace_back("cardinalities", cards);
  } else {
    std::error_code ec;
    const std::filesystem::path file = std::filesystem::weakly_canonical(o.train_file, ec);
    s.stream.emplace_back("--train-file", ec ? o.train_file : file.string());
    const uintmax_t bytes = std::filesystem::file_size(o.train_file, ec);
    s.stream.emplace_back("--train-file size", ec ? "unknown" : std::to_string(bytes) + " bytes");
    s.stream.emplace_back("--epochs", std::to_string(o.epochs));
    if (o.eval_file.empty()) {
      s.stream.emplace_back("--holdout-every", std::to_string(o.holdout_every));
    } else {
      s.stream.emplace_back("--eval-file", o.eval_file);
    }
  }
  return s;
}

std::string state_to_json(const TrainState& s) {
  Json stream = Json::object();
  for (const auto& [flag, value] : s.stream) stream[flag] = value;
  const Json j = {{"run_id", s.run_id},
                  {"samples", s.progress.samples},
                  {"steps", s.progress.steps},
                  {"incremental_threshold", s.incremental_threshold},
                  {"dim", s.dim},
                  {"batch_size", s.batch_size},
                  {"optimizer", s.optimizer},
                  {"stream", stream}};
  return j.dump();
}

TrainState state_from_json(const std::string& text, const std::string& where) {
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    throw InvalidArgument(where + ": the trainer state is not a JSON object");
  }
  TrainState s;
  s.run_id = string_field(j, "run_id", where);
  const bool hex =
      s.run_id.size() == 32 && s.run_id.find_first_not_of("0123456789abcdef") == std::string::npos;
  if (!hex) bad_field(where, "run_id", j.at("run_id"), "expected 32 lowercase hex digits");
  s.progress.samples = u64_field(j, "samples", where);
  s.progress.steps = u64_field(j, "steps", where, 0, s.progress.samples);
  if ((s.progress.steps == 0) != (s.progress.samples == 0)) {
    bad_field(where, "steps", j.at("steps"),
              "must be 0 exactly when samples is 0 (samples = " +
                  std::to_string(s.progress.samples) + ")");
  }
  s.incremental_threshold = u64_field(j, "incremental_threshold", where);
  s.dim = static_cast<uint32_t>(u64_field(j, "dim", where, 1, 1024));
  s.batch_size = static_cast<uint32_t>(u64_field(j, "batch_size", where, 1, 1u << 22));
  s.optimizer = string_field(j, "optimizer", where);
  try {
    (void)parse_optimizer(s.optimizer);
  } catch (const InvalidArgument&) {
    bad_field(where, "optimizer", j.at("optimizer"),
              "expected sgd, adam, adagrad, rowwise_adagrad, rmsprop or ftrl");
  }
  const Json& stream = field(j, "stream", where);
  if (!stream.is_object() || stream.empty() || stream.size() > 64) {
    bad_field(where, "stream", stream, "expected an object of 1-64 strings");
  }
  for (const auto& [flag, value] : stream.items()) {
    if (!value.is_string()) bad_field(where, "stream", stream, "expected an object of strings");
    s.stream.emplace_back(flag, value.get<std::string>());
  }
  if (!stream.contains("--data")) bad_field(where, "stream", stream, "must name --data");
  return s;
}

void check_resume_compatible(const TrainState& saved, const TrainState& current,
                             const TrainOptions& o) {
  const std::string what = "--resume = '" + o.resume + "'";
  if (saved.dim != current.dim) {
    throw InvalidArgument(what + ": --dim = " + std::to_string(current.dim) +
                          ", the checkpoint's model has --dim " + std::to_string(saved.dim) +
                          "; a run continues with the dim it started with");
  }
  if (saved.optimizer != current.optimizer && !o.reset_optimizer) {
    throw InvalidArgument(what + ": --optimizer = " + current.optimizer +
                          ", the checkpoint was trained with --optimizer " + saved.optimizer +
                          "; pass --optimizer " + saved.optimizer +
                          " to continue, or --reset-optimizer to switch (the " + saved.optimizer +
                          " state is then dropped)");
  }
  if (saved.batch_size != current.batch_size && !o.allow_different_batch_size) {
    throw InvalidArgument(what + ": --batch-size = " + std::to_string(current.batch_size) +
                          ", the checkpoint's run used --batch-size " +
                          std::to_string(saved.batch_size) + "; pass --batch-size " +
                          std::to_string(saved.batch_size) +
                          " to continue, or --allow-different-batch-size");
  }
  if (o.allow_different_data) return;
  auto value_in = [](const TrainState& s, const std::string& flag) -> std::string {
    for (const auto& [f, v] : s.stream) {
      if (f == flag) return v;
    }
    return "(not set)";
  };
  std::vector<std::string> flags;
  for (const auto& [f, v] : saved.stream) flags.push_back(f);
  for (const auto& [f, v] : current.stream) flags.push_back(f);
  for (const std::string& flag : flags) {
    const std::string was = value_in(saved, flag), now = value_in(current, flag);
    if (was != now) {
      throw InvalidArgument(what + ": the data stream differs from the checkpoint's: " + flag +
                            " = " + now + ", the checkpoint's run used " + was +
                            "; continuing would train on other samples than the ones it "
                            "skips (pass --allow-different-data to do so anyway)");
    }
  }
}

}  // namespace dynemb::train
