// kai native core: the allocate action's loop for the built-in plugin set.
//
// One call runs the whole allocate action of a session (queue-tree pop with the
// proportion queue order, job order, gang chunks, capacity checks, per-task node
// selection with the built-in predicates and scorers, rollback, pipelining, elastic
// push-back) on compact arrays that kai.actions.fast_allocate prepares, and returns the
// ordered attempts and placements that the Python side replays.  The semantics are
// those of the Python slow path (kai.actions.allocate); see fast_allocate.py for the
// input layout.
#pragma once

namespace pybind11 {
class module_;
}

namespace kai::alloc {

/// Adds ``allocate_loop`` to the extension module.
void register_bindings(pybind11::module_& m);

}  // namespace kai::alloc
