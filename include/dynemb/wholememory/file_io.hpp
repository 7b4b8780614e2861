// Loading a WholeMemory from raw binary files and storing it, each rank reading and writing only
// its own part (docs/wholememory.md, "Files").
#pragma once

#include <string>
#include <vector>

#include "dynemb/wholememory/memory.hpp"

namespace dynemb::wholememory {

// Collective: the memory's bytes (rows in order) are the concatenation of `files`; each rank
// reads the byte range of its part. Throws InvalidArgument on every rank when a file is missing
// or the files' total size is not the memory's size (naming both); then nothing is read.
void load_from_files(WholeMemory& memory, const std::vector<std::string>& files);

// Collective: writes the whole memory to one file `path` (rank 0 creates it at its full size,
// every rank writes its part at its offset, fsync), replacing what was there.
void store_to_file(const WholeMemory& memory, const std::string& path);

// Collective: each rank writes its part to "<prefix>_part_<r>_of_<world>.bin" (an empty file for
// a rank holding no row); returns every rank's file name in rank order (the same list on every
// rank), which load_from_files reads back at any world size.
std::vector<std::string> store_parts(const WholeMemory& memory, const std::string& prefix);

// The byte ranges of `files` (sizes `sizes`) that hold bytes [offset, offset + length) of their
// concatenation: (file index, offset in the file, length) in order. InvalidArgument when the
// range goes past the end.
struct FileSegment {
  size_t file = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};
std::vector<FileSegment> segments_of(const std::vector<uint64_t>& sizes, uint64_t offset,
                                     uint64_t length);

}  // namespace dynemb::wholememory
