// SPDX-License-Identifier: MIT
// The two identities of a loaded release, computed once when an Engine loads it:
//   engine_identity          the state cache's key component (Engine::model_identity): which
//                            numbers this process's engine would compute for a token prefix;
//   release_routing_identity the replica-independent identity of Decision::state_key
//                            (Engine::routing_identity, docs/DEPLOYMENT.md): which release, on any
//                            host, so that a balancer keeps a state on one replica.
// Both are lowercase SHA-256 hex strings over a small line-oriented text; their exact inputs are
// part of the cache and routing contracts, so changing what is hashed changes every key.
#pragma once

#include <string>

#include "runtime/backbone.h"
#include "runtime/release.h"

namespace clef {

/// The state cache's model identity. Hashes the lines
///   dir=<weakly canonical folder path>
///   gguf=<GGUF file name>                       (GGUF-backed releases only)
///   file=<name> size=<bytes> mtime=<ticks>      (every regular file of the folder, sorted)
///   mmproj=<canonical path> size=<bytes> mtime=<ticks>   (with --mmproj; 0 when unreadable)
///   precision=<n> chunk=<n> threads=<n> padded=<0|1> pad=<id>
/// i.e. where the release is, which files it has, and every backbone option that changes the
/// numbers. File contents are not hashed (gigabytes): name + size + mtime identify them within
/// one process lifetime, which is all a cache entry lives. Entries that cannot be examined (a
/// symlink loop, a file removed meanwhile) are skipped, never an error: the loader has already
/// read what it needs.
std::string engine_identity(const ReleaseFolder& release, const Backbone& backbone);

/// The routing identity. Hashes "clef-routing-v1\n", then for every regular file of the folder,
/// sorted, "file=<name> size=<bytes> sha256=<hex>\n", then "mmproj size=<bytes> sha256=<hex>\n" for
/// the --mmproj projector (it may live outside the folder). A file's sha256 covers its bytes when it
/// holds at most 16 MiB, else its first and last MiB (weights differ there between checkpoints of
/// one shape), so that hashing a multi-gigabyte release stays cheap. No path, modification time,
/// folder name or engine option enters, so copies of one release on several hosts agree. A file
/// that cannot be read is left out, as by engine_identity.
std::string release_routing_identity(const ReleaseFolder& release);

}  // namespace clef
