// kai native core: definitions shared by every kernel area.
//
// The kernels are plain C++ over raw, C-contiguous buffers; they know nothing about
// Python.  The binding files (native/bindings/) convert numpy arrays to pointers,
// validate shapes and release the GIL around the calls.
//
// Numerical contract: every kernel performs exactly the same floating-point operations,
// in the same order, as the reference implementation in
// src/kai/backends/python_backend.py, so that all backends agree bit for bit.  Do not
// reassociate expressions, and keep -ffp-contract=off (see CMakeLists.txt).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kai {

/// Tolerance used by resource comparisons ("request <= available + EPS").
inline constexpr double EPS = 1e-9;

/// Sentinel meaning "unlimited" for queue deserved quota / limit values.
inline constexpr double UNLIMITED = -1.0;

/// Resource vector column layout (node matrices are N x R).
enum ResourceIndex : std::size_t {
  kCpu = 0,     // millicores
  kMemory = 1,  // bytes
  kGpu = 2,     // whole GPUs, may be fractional
  kPods = 3,    // pod count
  // 4.. : extended resources
};

/// Signed index type used for node/queue indices returned to Python (numpy int64).
using index_t = std::int64_t;

}  // namespace kai
