// kai native core: a victim-search simulation's re-placement.
//
// kai.actions.solvers.simulate evicts a scenario's victims, then re-places the
// victims' jobs and the preemptor (the part being probed) in queue order, every
// placement a pipeline; the scenario fails at once if the preemptor cannot be placed
// whole when its turn comes.  Most simulations of a busy cluster end that way: the
// victims' queues come first and take their places back.  replace_victims() evicts the
// victims and runs that re-placement on copies of the node matrices and queue
// allocations, with the same queue order (kai/queue_policy.hpp), the same node choice
// (select_node), the same statement arithmetic and the same skips, and says whether the
// preemptor gets placed.  Asked to (consolidation, which loses no pod), it goes on to
// the end of the queue and also says whether every victim found a place again.  It can
// also record its steps (each pod's node, each gang rolled back), which the Python side
// replays on the statement when the preemptor is placed: the statement is then the one
// the Python loop would make, without the queue and the node choices.  The caller's
// arrays are only read.
//
// The Python side (kai.actions.solvers.replacement) lays the simulation's queue out
// in these arrays and takes this path only for what they describe: participants with
// whole-GPU or no-GPU pods, victims running or bound before the session or bound in it
// (not pipelined), and jobs that are not semi-preemptible.
#pragma once

#include <cstdint>
#include <vector>

#include "kai/allocate.hpp"
#include "kai/queue_policy.hpp"

namespace kai::alloc {

struct Replacement {
  // ---- nodes (N x R), before the evictions
  const double* idle = nullptr;
  const double* releasing = nullptr;
  const bool* within = nullptr;  // [N]: the nodes the simulation may place on
  const bool* masks = nullptr;   // [K, P, N]: predicate masks per constraint set
  i64 P = 0;
  double count_slack = 0.0;  // kai.actions.solvers.scenario.COUNT_SLACK
  // From this many pods to place, nodes are grouped per class of pods alike for the
  // node choice (NodeChooser::choose_alike: the same choices, cheaper when many).
  i64 alike_from = 0;
  // Follow the re-placement past the preemptor, to tell whether a victim is left
  // without a place (Replaced::kVictimLeft).
  bool every_victim = false;
  // Where to record the re-placement's steps (Step), so that the caller can make the
  // same statement without choosing again; recording follows it to its end.
  std::vector<i64>* steps = nullptr;
  // Where to copy the node rows (idle, releasing: N x R each) as the re-placement leaves
  // them, when it places the preemptor: a check that the statement its steps make ends
  // on the same rows.
  std::vector<double>* final_idle = nullptr;
  std::vector<double>* final_releasing = nullptr;

  // ---- queues (Q x 3), before the evictions
  i64 Q = 0;
  QueueRules rules;
  const double* q_alloc = nullptr;
  const double* q_alloc_np = nullptr;
  // The simulation queue's tree: the children of queue q are kids[kid_start[q] ..
  // kid_start[q + 1]), those of the root at q = Q, in the order the queue met them.
  const i64* kid_start = nullptr;
  const i64* kids = nullptr;

  // ---- the pending jobs that are not participants (stand-ins, kai's PendingPool):
  // per leaf queue q, base entries base_start[q] .. base_start[q + 1] in job order,
  // each with the request the queue order reads of it; skipped: the participants' own
  // entries.
  const i64* base_start = nullptr;     // [Q + 1]
  const double* base_request = nullptr;  // [B, 3]
  const bool* base_skipped = nullptr;    // [B]

  // ---- participants: the victims' jobs and the preemptor, per leaf in job order
  i64 M = 0;
  i64 preemptor = -1;                // the participant that is the preemptor
  const i64* own_start = nullptr;    // [Q + 1]: participants of leaf q, in order
  const i64* own = nullptr;          // participant indices
  const i64* p_before = nullptr;     // [M]: the base entry it comes before (its leaf's
                                     // base end: after them all)
  const double* p_request = nullptr;   // [M, 3]: what the queue order reads of it
  const i64* p_leaf = nullptr;         // [M]
  const i64* p_task_start = nullptr;   // [M + 1]: its pods to place, in order
  const i64* p_np_count = nullptr;     // [M]: how many of them are non-preemptible
  const bool* p_np_charge = nullptr;   // [M]: its pods charge the non-preemptible use
  const double* p_gpu_need = nullptr;  // [M]: its largest whole-GPU request

  // ---- the victims, evicted first in this order (Statement.evict)
  i64 V = 0;
  const double* v_req = nullptr;   // [V, R]
  const double* v_qvec = nullptr;  // [V, 3]
  const i64* v_node = nullptr;     // [V]
  const i64* v_leaf = nullptr;     // [V]: its job's leaf queue
  const bool* v_np = nullptr;      // [V]: its job is non-preemptible
  // [V]: pipelined in the session (on releasing capacity, not running there): its
  // eviction undoes that placement and keeps the place it leaves releasing, and a pod
  // that was moved there also gives up the place it held where it was (v_held, -1: none).
  const bool* v_pipelined = nullptr;
  const i64* v_held = nullptr;

  // ---- the participants' pods
  const double* t_req = nullptr;        // [T, R]
  const double* t_qvec = nullptr;       // [T, 3]: what it charges its queue
  const i64* t_mask = nullptr;          // [T]: its constraint set
  const i64* t_nominated = nullptr;     // [T]
  const i64* t_evicted_from = nullptr;  // [T]: the node its eviction left (-1: pending)
  // [T]: a pod placed earlier in the session and evicted back to pending: the node of
  // the place it left (held releasing, a vacated place), -1 for the others.
  const i64* t_vacated_at = nullptr;
  // [T]: placed back there (or on t_also, an older vacated place of it; -1: none), such a
  // pod gets its placement back: pipelined (t_pipelined_back, taking its held place
  // t_held_at again, -1: none) or bound.
  const bool* t_pipelined_back = nullptr;
  const i64* t_held_at = nullptr;
  const i64* t_also = nullptr;
};

/// What a simulation's re-placement found.
enum class Replaced : int {
  kPreemptorLeft = 0,  // the preemptor is not placed whole in its turn: the scenario fails
  kPlaced = 1,         // the preemptor is placed (and, if followed, every victim)
  kVictimLeft = 2,     // followed (``every_victim`` or ``steps``): the preemptor is placed,
                       // a victim is not
  kUndecided = 3,      // the arrays cannot tell (a queue order tie left to queue names)
};

/// A recorded step of the re-placement, three integers (kind, a, b), in the order the
/// simulation's statement takes them after the evictions.
enum class Step : i64 {
  kCheckpoint = 0,  // (0, participant, -1): a job's pods are about to be placed
  kPlace = 1,       // (1, pod, node): the pod pipelined on the node
  kRollback = 2,    // (2, participant, -1): back to the last checkpoint (a pod found no node)
  kRetake = 3,      // (3, pod, node): a pod placed in the session, back on a node of its
                    // vacated places where its placement cannot be restored: pipelined
                    // onto its vacated place there (kPlace for such a pod: restored)
};

/// The re-placement of ``sim``'s victims and preemptor.  ``picker`` is the session's
/// one-task input (kai.actions.fast_allocate.NodePicker).
Replaced replace_victims(const Input& picker, const Replacement& sim);

}  // namespace kai::alloc
