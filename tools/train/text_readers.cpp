#include "train/text_readers.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <vector>

#include "dynemb/core/error.hpp"
#include "train/feature_key.hpp"
#include "train/stop_request.hpp"

namespace dynemb::train {
namespace {

constexpr uint32_t kCriteoIntegerFields = 13;
constexpr uint32_t kCriteoCategoricalFields = 26;

[[noreturn]] void malformed(const std::string& where, const std::string& what) {
  throw InvalidArgument(where + ": " + what);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

double parse_number(std::string_view text, const std::string& where, const char* what) {
  const std::string_view original = text;
  if (text.size() > 1 && text.front() == '+') text.remove_prefix(1);  // "+1" labels
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value)) {
    malformed(where,
              std::string(what) + " = '" + std::string(original) + "', must be a finite number");
  }
  // Values are used as float32: one past its range would be inf there.
  if (std::fabs(value) > static_cast<double>(std::numeric_limits<float>::max())) {
    malformed(where, std::string(what) + " = '" + std::string(original) +
                         "', must be finite in float32 (|value| <= 3.4028235e38)");
  }
  return value;
}

uint64_t parse_index(std::string_view text, const std::string& where, const char* what) {
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    malformed(where,
              std::string(what) + " = '" + std::string(text) + "', must be a non-negative integer");
  }
  return value;
}

// A 0/1 label (libffm, Criteo), or with `signed_ok` also -1/+1 (libsvm's binary convention).
float parse_label(std::string_view text, const std::string& where, bool signed_ok) {
  const double v = parse_number(text, where, "label");
  if (v == 1.0) return 1.0f;
  if (v == 0.0 || (signed_ok && v == -1.0)) return 0.0f;
  malformed(where, "label = '" + std::string(text) + "', must be " +
                       (signed_ok ? "0 or 1 (or -1 / +1)" : "0 or 1"));
}

// Splits on runs of spaces/tabs.
std::vector<std::string_view> split_whitespace(std::string_view line) {
  std::vector<std::string_view> tokens;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
    if (j > i) tokens.push_back(line.substr(i, j - i));
    i = j;
  }
  return tokens;
}

// Criteo's integer columns: small values as they are, larger ones in log^2 buckets.
uint64_t integer_bucket(int64_t v) {
  if (v <= 2) return static_cast<uint64_t>(v + 8);  // -? .. 2, shifted positive
  const double l = std::log(static_cast<double>(v));
  return 16 + static_cast<uint64_t>(l * l);
}

}  // namespace

TextFormat parse_text_format(const std::string& name, const char* option) {
  if (name == "criteo") return TextFormat::kCriteo;
  if (name == "libsvm") return TextFormat::kLibsvm;
  if (name == "libffm") return TextFormat::kLibffm;
  throw InvalidArgument(std::string(option) + " = '" + name +
                        "', must be one of synthetic, criteo, libsvm, libffm");
}

std::string to_string(TextFormat format) {
  switch (format) {
    case TextFormat::kCriteo:
      return "criteo";
    case TextFormat::kLibsvm:
      return "libsvm";
    case TextFormat::kLibffm:
    default:
      return "libffm";
  }
}

void parse_criteo_line(std::string_view line, SampleBatch& batch, const std::string& where) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  std::vector<std::string_view> columns;
  size_t start = 0;
  for (size_t i = 0; i <= line.size(); ++i) {
    if (i == line.size() || line[i] == '\t') {
      columns.push_back(line.substr(start, i - start));
      start = i + 1;
    }
  }
  const size_t expected = 1 + kCriteoIntegerFields + kCriteoCategoricalFields;
  if (columns.size() != expected) {
    malformed(where, "columns = " + std::to_string(columns.size()) + ", a Criteo line has " +
                         std::to_string(expected) + " tab-separated columns");
  }
  const float label = parse_label(trim(columns[0]), where, false);
  if (columns[0] != "0" && columns[0] != "1") {
    malformed(where, "label = '" + std::string(columns[0]) + "', must be 0 or 1");
  }
  for (uint32_t f = 0; f < kCriteoIntegerFields; ++f) {
    const std::string_view text = trim(columns[1 + f]);
    if (text.empty()) continue;
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size()) {
      malformed(where, "integer column " + std::to_string(f + 1) + " = '" + std::string(text) +
                           "', must be an integer or empty");
    }
    batch.add_id(feature_key(f, hash_key_bits(integer_bucket(v))), 1.0f);
  }
  for (uint32_t c = 0; c < kCriteoCategoricalFields; ++c) {
    const std::string_view text = trim(columns[1 + kCriteoIntegerFields + c]);
    if (text.empty()) continue;
    batch.add_id(feature_key(kCriteoIntegerFields + c, hash_bytes(text)), 1.0f);
  }
  batch.end_sample(label);
}

void parse_libsvm_line(std::string_view line, SampleBatch& batch, const std::string& where) {
  const std::vector<std::string_view> tokens = split_whitespace(line);
  if (tokens.empty()) malformed(where, "empty line, a libsvm line starts with a label");
  const float label = parse_label(tokens[0], where, true);
  for (size_t t = 1; t < tokens.size(); ++t) {
    const size_t colon = tokens[t].find(':');
    if (colon == std::string_view::npos) {
      malformed(where, "feature = '" + std::string(tokens[t]) + "', must be index:value");
    }
    const uint64_t index = parse_index(tokens[t].substr(0, colon), where, "feature index");
    const double value = parse_number(tokens[t].substr(colon + 1), where, "feature value");
    batch.add_id(feature_key(0, hash_key_bits(index)), static_cast<float>(value));
  }
  batch.end_sample(label);
}

void parse_libffm_line(std::string_view line, SampleBatch& batch, const std::string& where) {
  const std::vector<std::string_view> tokens = split_whitespace(line);
  if (tokens.empty()) malformed(where, "empty line, a libffm line starts with a label");
  const float label = parse_label(tokens[0], where, false);
  for (size_t t = 1; t < tokens.size(); ++t) {
    const std::string_view token = tokens[t];
    const size_t c1 = token.find(':');
    const size_t c2 = c1 == std::string_view::npos ? c1 : token.find(':', c1 + 1);
    if (c2 == std::string_view::npos) {
      malformed(where, "feature = '" + std::string(token) + "', must be field:index:value");
    }
    const uint64_t field = parse_index(token.substr(0, c1), where, "field");
    if (field >= kMaxFields) {
      malformed(where,
                "field = " + std::to_string(field) + ", must be < " + std::to_string(kMaxFields));
    }
    const uint64_t index = parse_index(token.substr(c1 + 1, c2 - c1 - 1), where, "feature index");
    const double value = parse_number(token.substr(c2 + 1), where, "feature value");
    batch.add_id(feature_key(static_cast<uint32_t>(field), hash_key_bits(index)),
                 static_cast<float>(value));
  }
  batch.end_sample(label);
}

TextFileStream::TextFileStream(std::string path, TextFormat format, const char* option,
                               LineSelection selection, uint32_t holdout_every, uint32_t epochs)
    : path_(std::move(path)),
      format_(format),
      option_(option),
      selection_(selection),
      holdout_every_(holdout_every),
      epochs_(epochs),
      in_(path_) {
  if (!in_) throw InvalidArgument(std::string(option) + " = '" + path_ + "', cannot open the file");
  std::error_code ec;
  file_bytes_ = std::filesystem::file_size(path_, ec);
  require(selection == LineSelection::kAll || holdout_every >= 2, option, "holdout_every",
          std::to_string(holdout_every), "must be >= 2 to hold lines out");
  require(epochs >= 1, option, "epochs", std::to_string(epochs), "must be >= 1");
}

bool TextFileStream::next_line() {
  while (true) {
    if (!std::getline(in_, line_)) {
      if (in_.bad()) throw Error(path_ + ": read error after line " + std::to_string(line_number_));
      if (++epoch_ >= epochs_ || line_number_ == 0) return false;
      in_.clear();
      in_.seekg(0);
      line_number_ = 0;
      sample_index_ = 0;
      continue;
    }
    ++line_number_;
    bytes_read_ += line_.size() + 1;
    if ((line_number_ & 0xffff) == 0) throw_if_stop_requested(("reading " + path_).c_str());
    const std::string_view view = trim(line_);
    if (view.empty() || view.front() == '#') continue;
    const uint64_t index = sample_index_++;
    if (selection_ == LineSelection::kAll) return true;
    const bool held_out = index % holdout_every_ == holdout_every_ - 1;
    if (held_out == (selection_ == LineSelection::kHeldOut)) return true;
  }
}

size_t TextFileStream::next(SampleBatch& batch, size_t max_samples) {
  size_t n = 0;
  while (n < max_samples && next_line()) {
    const std::string where = path_ + ":" + std::to_string(line_number_);
    switch (format_) {
      case TextFormat::kCriteo:
        parse_criteo_line(line_, batch, where);
        break;
      case TextFormat::kLibsvm:
        parse_libsvm_line(line_, batch, where);
        break;
      case TextFormat::kLibffm:
        parse_libffm_line(line_, batch, where);
        break;
    }
    ++n;
  }
  return n;
}

uint64_t TextFileStream::skip(uint64_t n) {
  uint64_t skipped = 0;
  while (skipped < n && next_line()) ++skipped;
  return skipped;
}

double TextFileStream::fraction_read() const {
  const double total = static_cast<double>(file_bytes_) * epochs_;
  if (total <= 0) return -1.0;
  return std::min(1.0, static_cast<double>(bytes_read_) / total);
}

std::string TextFileStream::describe() const {
  std::string what = selection_ == LineSelection::kHeldOut ? "held-out lines of " : "";
  return what + to_string(format_) + " file " + path_ +
         (epochs_ > 1 ? " (" + std::to_string(epochs_) + " epochs)" : "");
}

}  // namespace dynemb::train
