// See kai/memory.hpp.  The hooks run with a GIL held, but the arena allocator is one
// per process while interpreters may each have their own GIL: a lock guards the cache
// (taken once per 1 MiB arena, so it costs nothing measurable).
#include "kai/memory.hpp"

#include <Python.h>

#include <mutex>

namespace kai::memory {
namespace {

// A fixed table, so that nothing here allocates or runs a destructor at exit (the
// interpreter may free arenas during finalization).  4096 arenas of 1 MiB: 4 GiB.
constexpr std::size_t kSlots = 4096;

PyObjectArenaAllocator g_previous{};
bool g_installed = false;
void* g_cache[kSlots];
std::size_t g_count = 0;
std::size_t g_arena_size = 0;  // the interpreter's arena size, seen at the first call
std::size_t g_max_arenas = 0;
std::mutex g_lock;

void* cached_alloc(void* /*ctx*/, std::size_t size) {
  std::lock_guard<std::mutex> hold(g_lock);
  if (size == g_arena_size && g_count > 0) {
    return g_cache[--g_count];
  }
  if (g_arena_size == 0) {
    g_arena_size = size;
  }
  return g_previous.alloc(g_previous.ctx, size);
}

void cached_free(void* /*ctx*/, void* ptr, std::size_t size) {
  std::lock_guard<std::mutex> hold(g_lock);
  if (g_arena_size == 0) {
    g_arena_size = size;
  }
  if (size == g_arena_size && g_count < g_max_arenas) {
    g_cache[g_count++] = ptr;
    return;
  }
  g_previous.free(g_previous.ctx, ptr, size);
}

}  // namespace

void retain_arenas(std::size_t max_bytes) {
  std::lock_guard<std::mutex> hold(g_lock);
  if (!g_installed) {
    PyObject_GetArenaAllocator(&g_previous);
    PyObjectArenaAllocator cache{nullptr, cached_alloc, cached_free};
    PyObject_SetArenaAllocator(&cache);
    g_installed = true;
  }
  // Arenas are 1 MiB on 64-bit CPython (256 KiB on older or 32-bit builds); until one
  // has been seen the budget is counted in the larger size.
  const std::size_t arena = g_arena_size ? g_arena_size : (std::size_t{1} << 20);
  std::size_t arenas = max_bytes / arena;
  g_max_arenas = arenas < kSlots ? arenas : kSlots;
  while (g_count > g_max_arenas) {
    --g_count;
    g_previous.free(g_previous.ctx, g_cache[g_count], g_arena_size);
  }
}

std::size_t cached_bytes() {
  std::lock_guard<std::mutex> hold(g_lock);
  return g_count * g_arena_size;
}

}  // namespace kai::memory
