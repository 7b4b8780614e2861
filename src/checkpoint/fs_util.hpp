// File-system steps of a crash-safe dump: staging names, the atomic swap into place and the
// removal of stale staging directories. The single operations are in file_ops.hpp.
#pragma once

#include <filesystem>
#include <string>

#include "dynemb/checkpoint/file_ops.hpp"

namespace dynemb::checkpoint::detail {

// Makes `staging` appear at `target` in one step: rename when `target` does not exist, an
// atomic exchange (renameat2 RENAME_EXCHANGE) when it does, after which the old checkpoint (now
// at `staging`) is removed. fsyncs the parent directory in between.
void publish_directory(const std::filesystem::path& staging, const std::filesystem::path& target);
// A fresh staging directory name next to `target`: ".<name>.dynemb-tmp-<pid>-<random>".
std::filesystem::path staging_path_for(const std::filesystem::path& target);

}  // namespace dynemb::checkpoint::detail
