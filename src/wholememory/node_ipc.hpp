// What the ranks of one node share besides the communicator: a check that they are on one node,
// and file descriptors handed to every rank over Unix sockets (SCM_RIGHTS).
#pragma once

#include <string>
#include <vector>

#include "dynemb/dist/communicator.hpp"

namespace dynemb::wholememory {

// Throws NotAvailable on every rank, naming the ranks and their hosts, unless every rank of
// `comm` runs on this node (same host name and boot id). `what` names the caller.
void require_one_node(dist::Communicator& comm, const std::string& what);

// Collective: every rank passes its descriptor (or -1: none) and gets every rank's, as
// descriptors of its own (fds[r] for rank r; fds[rank] = a duplicate of `mine`; -1 where a rank
// passed none). The caller closes what it gets. Throws on every rank if any rank failed.
std::vector<int> exchange_fds(dist::Communicator& comm, int mine, const std::string& what);

// Closes each descriptor >= 0.
void close_fds(const std::vector<int>& fds) noexcept;

}  // namespace dynemb::wholememory
