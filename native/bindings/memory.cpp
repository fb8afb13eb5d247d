// Bindings of the arena cache (kai/memory.hpp).
#include <pybind11/pybind11.h>

#include "kai/memory.hpp"
#include "registrations.hpp"

namespace kai::bind {

void register_memory(py::module_& m) {
  m.def("retain_arenas", &kai::memory::retain_arenas, py::arg("max_bytes"),
        "Keep freed object arenas mapped for reuse, up to max_bytes (0: none).");
  m.def("cached_arena_bytes", &kai::memory::cached_bytes,
        "Bytes of freed object arenas the cache holds now.");
}

}  // namespace kai::bind
