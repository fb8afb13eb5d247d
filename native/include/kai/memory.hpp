// kai native core: a cache of the object arenas that Python's allocator frees.
//
// A session builds its whole state (a few hundred bytes per pod) and frees it at the
// end.  CPython's small-object allocator then returns each emptied 1 MiB arena to the
// operating system, and the next session maps it again and takes a page fault on every
// first write (2-3 us a page on a virtual machine: an eighth of a 100,000-pod session).
// Installed, the cache keeps freed arenas mapped, up to a budget, and hands them back
// when the allocator asks for new ones.
#pragma once

#include <cstddef>

namespace kai::memory {

/// Install the cache in front of the interpreter's arena allocator (once; later calls
/// only change the budget).  ``max_bytes`` 0 frees the cached arenas and caches none.
/// Must be called with the GIL held.
void retain_arenas(std::size_t max_bytes);

/// Bytes of freed arenas held now.
std::size_t cached_bytes();

}  // namespace kai::memory
