// A pair's backup window (speculative decoding): one snapshot per side,
// restored or committed on both sides or on neither.
#pragma once

#include <kvpool/allocator_snapshot.hpp>

namespace kvpool {

// The marker a pair's backup_state() returns: full is the full side's
// snapshot, peer the other side's (the SWA side, or the Mamba state side).
struct PairSnapshot {
    AllocatorSnapshot full;
    AllocatorSnapshot peer;
};

namespace detail {

// The pair's calls over its two sides. Both snapshots are checked before
// either side changes, so a bad or stale one changes nothing.
template <class Side> PairSnapshot backup_pair(Side& full, Side& peer) {
    return {full.backup_state(), peer.backup_state()};
}

template <class Side>
void check_pair_snapshot(const Side& full, const Side& peer, const PairSnapshot& snapshot,
                         const char* call) {
    full.core().check_snapshot(snapshot.full, call);
    peer.core().check_snapshot(snapshot.peer, call);
}

template <class Side, class ExecutionSpace>
void restore_pair(const ExecutionSpace& space, Side& full, Side& peer,
                  const PairSnapshot& snapshot) {
    check_pair_snapshot(full, peer, snapshot, "restore_state");
    full.restore_state(space, snapshot.full);
    peer.restore_state(space, snapshot.peer);
}

template <class Side> void commit_pair(Side& full, Side& peer, const PairSnapshot& snapshot) {
    check_pair_snapshot(full, peer, snapshot, "commit_state");
    full.commit_state(snapshot.full);
    peer.commit_state(snapshot.peer);
}

} // namespace detail
} // namespace kvpool
