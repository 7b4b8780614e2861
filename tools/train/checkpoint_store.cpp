#include "train/checkpoint_store.hpp"

#include "dynemb/core/error.hpp"

namespace dynemb::train {

std::unique_ptr<CheckpointStore> make_checkpoint_store(const char* option) {
  throw NotAvailable(std::string("dynemb train: ") + option +
                     " needs the checkpoint part (include/dynemb/checkpoint), which is not built "
                     "yet; run without --checkpoint-dir / --resume");
}

}  // namespace dynemb::train
