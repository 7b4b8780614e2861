// The file operations a checkpoint dump performs, each durable (fsync of files and directories)
// and each announced to an optional hook first, so tests can fail or kill a dump at any chosen
// step. The trainer (tools/train) uses the same operations for its own directory changes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

namespace dynemb::checkpoint {

// One file operation of a dump, in the order a dump issues them.
enum class FileOp : uint8_t {
  kCreateDirectory = 1,
  kCreateFile,
  kWrite,
  kFsyncFile,
  kCloseFile,
  kFsyncDirectory,
  kRename,    // a rename onto a free name
  kExchange,  // an atomic exchange of two directories (renameat2 RENAME_EXCHANGE)
  kRemove,    // removal of a directory tree (a replaced checkpoint, a stale staging directory)
};

// "create_directory", "create_file", "write", ...
std::string to_string(FileOp op);

// Called before every file operation of a dump with the operation and its path; may throw (the
// operation is then not done) or end the process. Tests only: one hook per process.
using FileOpHook = std::function<void(FileOp op, const std::filesystem::path& path)>;

// Installs `hook` (empty: none) and returns the previous one. Not safe while a dump runs.
FileOpHook set_file_op_hook(FileOpHook hook);

// Announces `op` on `path` to the hook (if any). Every operation below calls it first.
void announce_file_op(FileOp op, const std::filesystem::path& path);

// Creates `dir` and its missing parents, fsyncing each parent whose entries changed.
void create_directories_durably(const std::filesystem::path& dir);
// fsyncs a directory (its entries become durable).
void fsync_directory(const std::filesystem::path& dir);
// Writes `text` to a new file (which must not exist), fsyncs and closes it.
void write_file_durably(const std::filesystem::path& path, const std::string& text);
// Makes a directory tree disappear at once (renamed to a staging name, parent fsynced), then
// deletes it; a crash during the deletion leaves only a staging directory that the next dump
// next to it removes.
void remove_directory_durably(const std::filesystem::path& dir);
// Removes the staging directories in `dir` (".<name>.dynemb-tmp-<pid>-<random>"; only those of
// `target_name` when given) whose writing process is gone: a dump killed before its rename, or
// a replaced checkpoint killed while being deleted. Returns how many it removed.
size_t remove_stale_staging(const std::filesystem::path& dir, const std::string& target_name = "");

}  // namespace dynemb::checkpoint
