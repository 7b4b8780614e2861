// File-system steps of a crash-safe dump: fsync of directories and the atomic swap into place.
#pragma once

#include <filesystem>
#include <string>

namespace dynemb::checkpoint::detail {

// fsyncs a directory (its entries become durable).
void fsync_directory(const std::filesystem::path& dir);
// Writes `text` to a new file and fsyncs it.
void write_file_durably(const std::filesystem::path& path, const std::string& text);
// Makes `staging` appear at `target` in one step: rename when `target` does not exist, an
// atomic exchange (renameat2 RENAME_EXCHANGE) when it does, after which the old checkpoint (now
// at `staging`) is removed. fsyncs the parent directory.
void publish_directory(const std::filesystem::path& staging, const std::filesystem::path& target);
// A fresh staging directory name next to `target`.
std::filesystem::path staging_path_for(const std::filesystem::path& target);

}  // namespace dynemb::checkpoint::detail
