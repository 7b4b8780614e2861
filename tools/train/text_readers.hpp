// Readers for CTR text files: Criteo's TSV, libsvm and libffm. Categorical values are hashed
// into 64-bit keys with the field in the high bits (feature_key).
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>

#include "train/sample_stream.hpp"

namespace dynemb::train {

enum class TextFormat : uint8_t { kCriteo, kLibsvm, kLibffm };

// "criteo", "libsvm", "libffm" (InvalidArgument otherwise, naming `option`).
TextFormat parse_text_format(const std::string& name, const char* option);
std::string to_string(TextFormat format);

// Criteo TSV: label, 13 integer columns (fields 0..12, log-bucketed), 26 hexadecimal
// categorical columns (fields 13..38); an empty column is a missing feature. Appends one sample
// to `batch`; throws InvalidArgument naming `where` (file:line) if the line is malformed.
void parse_criteo_line(std::string_view line, SampleBatch& batch, const std::string& where);
// libsvm: "label index:value ...", every feature in field 0 keyed by its index; the label is
// 0 or -1 (no click) or 1 or +1 (click); a value must be finite in float32.
void parse_libsvm_line(std::string_view line, SampleBatch& batch, const std::string& where);
// libffm: "label field:index:value ...", label 0 or 1, field < 254, a value finite in float32.
void parse_libffm_line(std::string_view line, SampleBatch& batch, const std::string& where);

// Which lines of a file a stream yields: every line, only the held-out ones (line index %
// holdout_every == holdout_every - 1), or all but those.
enum class LineSelection : uint8_t { kAll, kHeldOut, kTraining };

// A text file read line by line (blank lines and lines starting with '#' are not samples),
// `epochs` times over.
class TextFileStream final : public SampleStream {
 public:
  // Opens `path` (InvalidArgument naming `option` if it cannot be read).
  TextFileStream(std::string path, TextFormat format, const char* option,
                 LineSelection selection = LineSelection::kAll, uint32_t holdout_every = 0,
                 uint32_t epochs = 1);
  size_t next(SampleBatch& batch, size_t max_samples) override;
  uint64_t skip(uint64_t n) override;
  std::string describe() const override;
  // Bytes read over the bytes of every epoch.
  double fraction_read() const override;

 private:
  // Reads the next selected line into line_; false at the end of the last epoch.
  bool next_line();

  std::string path_;
  TextFormat format_;
  const char* option_;
  LineSelection selection_;
  uint32_t holdout_every_;
  uint32_t epochs_;
  uint32_t epoch_ = 0;
  uint64_t line_number_ = 0;   // of the current line, 1-based, in the current epoch
  uint64_t sample_index_ = 0;  // index among sample lines in the current epoch
  std::ifstream in_;
  std::string line_;
  uint64_t file_bytes_ = 0;  // size of the file when opened
  uint64_t bytes_read_ = 0;  // over every epoch so far
};

}  // namespace dynemb::train
