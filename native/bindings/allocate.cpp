// Binding of the allocate loop (kai/allocate.hpp): the inputs from the dict that
// kai.actions.fast_allocate prepares, the result as a dict of arrays.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstring>
#include <memory>
#include <utility>
#include <string>
#include <vector>

#include "common.hpp"
#include "kai/allocate.hpp"
#include "kai/simulation.hpp"
#include "registrations.hpp"

namespace kai::bind {
namespace {

using kai::alloc::i64;
using kai::alloc::Input;
using kai::alloc::Output;


// ValueError "<where>: <name>: expected N values, got M" unless ``a`` has ``expect``.
template <typename A>
void require_size(const A& a, std::size_t expect, const char* where, const char* name) {
  if (static_cast<std::size_t>(a.size()) != expect) {
    throw py::value_error(std::string(where) + ": " + name + ": expected " +
                          std::to_string(expect) + " values, got " + std::to_string(a.size()));
  }
}

template <typename A>
A get(const py::dict& d, const char* key, std::size_t expect) {
  PyObject* value = PyDict_GetItemString(d.ptr(), key);  // borrowed
  if (value == nullptr) throw py::key_error(std::string("allocate_loop: missing ") + key);
  A a = as_array<A>(value);
  require_size(a, expect, "allocate_loop", key);
  return a;
}

template <typename T>
py::array_t<T> to_array(const std::vector<T>& v, std::size_t cols = 0) {
  if (cols == 0) {
    py::array_t<T> a(static_cast<py::ssize_t>(v.size()));
    if (!v.empty()) std::memcpy(a.mutable_data(), v.data(), v.size() * sizeof(T));
    return a;
  }
  py::array_t<T> a({static_cast<py::ssize_t>(v.size() / cols), static_cast<py::ssize_t>(cols)});
  if (!v.empty()) std::memcpy(a.mutable_data(), v.data(), v.size() * sizeof(T));
  return a;
}

py::dict allocate_loop(const py::dict& d) {
  Input in;
  auto dim = [&](const char* key) { return py::cast<i64>(d[key]); };
  in.N = dim("N");
  in.R = dim("R");
  in.T = dim("T");
  in.J = dim("J");
  in.Q = dim("Q");
  in.S = dim("S");
  in.P = dim("P");
  in.K = dim("K");
  in.C = dim("C");
  in.gpu = dim("gpu_col");
  in.cpu = dim("cpu_col");
  in.max_depth = dim("max_depth");
  in.gpu_binpack = py::cast<bool>(d["gpu_binpack"]);
  in.cpu_binpack = py::cast<bool>(d["cpu_binpack"]);
  const auto N = static_cast<std::size_t>(in.N), R = static_cast<std::size_t>(in.R);
  const auto T = static_cast<std::size_t>(in.T), J = static_cast<std::size_t>(in.J);
  const auto Q = static_cast<std::size_t>(in.Q);
  if (in.gpu < 0 || in.gpu >= in.R || in.cpu < 0 || in.cpu >= in.R) {
    throw py::value_error("allocate_loop: resource column out of range");
  }
  auto idle = get<F64>(d, "idle", N * R);
  auto releasing = get<F64>(d, "releasing", N * R);
  auto used = get<F64>(d, "used", N * R);
  auto allocatable = get<F64>(d, "allocatable", N * R);
  auto cap_gpu = get<F64>(d, "cap_gpu", N);
  auto pred = get<Bool>(d, "pred_masks", static_cast<std::size_t>(in.S * in.P) * N);
  auto comps = get<I64>(d, "comps", static_cast<std::size_t>(in.C));
  auto comp_scale = get<F64>(d, "comp_scale", static_cast<std::size_t>(in.C));
  auto task_req = get<F64>(d, "task_req", T * R);
  auto task_qvec = get<F64>(d, "task_qvec", T * 3);
  auto task_sig = get<I64>(d, "task_sig", T);
  auto task_nom = get<I64>(d, "task_nom", T);
  auto job_start = get<I64>(d, "job_start", J + 1);
  auto job_leaf = get<I64>(d, "job_leaf", J);
  auto job_min = get<I64>(d, "job_min", J);
  auto job_active = get<I64>(d, "job_active", J);
  auto job_nonpipe = get<I64>(d, "job_nonpipe", J);
  auto job_pipelined = get<I64>(d, "job_pipelined", J);
  auto job_allocset = get<I64>(d, "job_allocset", J);
  auto job_np_mode = get<I64>(d, "job_np_mode", J);
  auto job_key = get<I64>(d, "job_key", J * static_cast<std::size_t>(in.K));
  auto key_kinds = get<I64>(d, "key_kinds", static_cast<std::size_t>(in.K));
  auto q_path_start = get<I64>(d, "q_path_start", Q + 1);
  const auto path_total = static_cast<std::size_t>(q_path_start.data()[Q]);
  auto q_path = get<I64>(d, "q_path", path_total);
  auto q_deserved = get<F64>(d, "q_deserved", Q * 3);
  auto q_limit = get<F64>(d, "q_limit", Q * 3);
  auto q_fair = get<F64>(d, "q_fair", Q * 3);
  auto q_allocatable = get<F64>(d, "q_allocatable", Q * 3);
  auto q_alloc = get<F64>(d, "q_alloc", Q * 3);
  auto q_alloc_np = get<F64>(d, "q_alloc_np", Q * 3);
  auto q_priority = get<I64>(d, "q_priority", Q);
  auto q_rank = get<I64>(d, "q_rank", Q);
  auto total = get<F64>(d, "total", 3);
  // index validation (the loop trusts them)
  for (std::size_t t = 0; t < T; ++t) {
    const i64 s = task_sig.data()[t];
    if (s < 0 || s >= in.S) throw py::value_error("allocate_loop: task_sig out of range");
    if (task_nom.data()[t] >= in.N) throw py::value_error("allocate_loop: task_nom range");
  }
  for (std::size_t j = 0; j < J; ++j) {
    const i64 q = job_leaf.data()[j];
    if (q >= in.Q) throw py::value_error("allocate_loop: job_leaf out of range");
    const i64 a = job_start.data()[j], b = job_start.data()[j + 1];
    if (a < 0 || b < a || b > in.T) throw py::value_error("allocate_loop: job_start");
  }
  for (std::size_t i = 0; i < path_total; ++i) {
    const i64 q = q_path.data()[i];
    if (q < 0 || q >= in.Q) throw py::value_error("allocate_loop: q_path out of range");
  }
  in.allocatable = allocatable.data();
  in.cap_gpu = cap_gpu.data();
  in.pred = pred.data();
  in.comps = comps.data();
  in.comp_scale = comp_scale.data();
  in.task_req = task_req.data();
  in.task_qvec = task_qvec.data();
  in.task_sig = task_sig.data();
  in.task_nom = task_nom.data();
  in.job_start = job_start.data();
  in.job_leaf = job_leaf.data();
  in.job_min = job_min.data();
  in.job_np_mode = job_np_mode.data();
  in.job_active = job_active.data();
  in.job_nonpipe = job_nonpipe.data();
  in.job_pipelined = job_pipelined.data();
  in.job_allocset = job_allocset.data();
  in.job_key = job_key.data();
  in.key_kinds = key_kinds.data();
  in.q_path_start = q_path_start.data();
  in.q_path = q_path.data();
  in.q_deserved = q_deserved.data();
  in.q_limit = q_limit.data();
  in.q_fair = q_fair.data();
  in.q_allocatable = q_allocatable.data();
  in.q_priority = q_priority.data();
  in.q_rank = q_rank.data();
  in.total = total.data();
  // The loadaware plugin's kernel form, when the session has the plugin.
  I64 la_alloc, la_thr, la_state, la_slot, la_rows, la_weights, la_est, la_flags, la_existing;
  Bool la_valid, la_counted;
  std::size_t LR = 0;
  if (d.contains("la_R")) {
    auto& la = in.la;
    la.R = dim("la_R");
    if (la.R <= 0) throw py::value_error("allocate_loop: la_R must be positive");
    LR = static_cast<std::size_t>(la.R);
    la.reasons = dim("la_reasons");
    la.expired_reason = dim("la_expired_reason");
    la.dominant_weight = dim("la_dominant_weight");
    la_alloc = get<I64>(d, "la_allocatable", N * LR);
    la_thr = get<I64>(d, "la_thresholds", 2 * N * LR);
    la_state = get<I64>(d, "la_state", 2 * N);
    la_slot = get<I64>(d, "la_reason_slot", 2 * N);
    la_rows = get<I64>(d, "la_row_delta", 4 * N);
    la_valid = get<Bool>(d, "la_valid", N);
    la_weights = get<I64>(d, "la_weights", LR);
    la_counted = get<Bool>(d, "la_counted", N);
    la_est = get<I64>(d, "la_estimates", T * LR);
    la_flags = get<I64>(d, "la_task_flags", T);
    la_existing = get<I64>(d, "la_existing", 4 * N * LR);
    const i64 R6 = la.reasons;
    if (la.expired_reason < 0 || la.expired_reason >= R6) {
      throw py::value_error("allocate_loop: la_expired_reason out of range");
    }
    for (std::size_t i = 0; i < 2 * N; ++i) {
      const i64 slot = la_slot.data()[i];
      if (slot < 0 || slot + la.R > R6) throw py::value_error("allocate_loop: la_reason_slot");
    }
    for (std::size_t i = 0; i < 4 * N; ++i) {
      const i64 kind = la_rows.data()[i];
      if (kind < kai::alloc::kRowUsage || kind > kai::alloc::kRowProd) {
        throw py::value_error("allocate_loop: la_row_delta");
      }
    }
    la.allocatable = la_alloc.data();
    la.thresholds = la_thr.data();
    la.state = la_state.data();
    la.reason_slot = la_slot.data();
    la.row_delta = la_rows.data();
    la.valid = la_valid.data();
    la.weights = la_weights.data();
    la.counted = la_counted.data();
    la.estimates = la_est.data();
    la.task_flags = la_flags.data();
  }
  if (in.C > kai::alloc::kMaxComponents) {
    throw py::value_error("allocate_loop: more score components than the loop knows");
  }
  // Shared GPUs, when the session has fractional tasks to place.
  I64 sg_node, sg_tenants, sg_orders;
  F64 sg_used, sg_releasing, sg_pipelined, sg_free_idle, sg_free_any, sg_portion;
  Bool sg_from_releasing;
  if (d.contains("sg_groups")) {
    auto& sg = in.sg;
    sg.on = true;
    sg.G = dim("sg_groups");
    const auto G = static_cast<std::size_t>(sg.G);
    sg_node = get<I64>(d, "sg_group_node", G);
    sg_used = get<F64>(d, "sg_group_used", G);
    sg_releasing = get<F64>(d, "sg_group_releasing", G);
    sg_pipelined = get<F64>(d, "sg_group_pipelined", G);
    sg_tenants = get<I64>(d, "sg_group_tenants", G);
    sg_from_releasing = get<Bool>(d, "sg_group_from_releasing", G);
    sg_free_idle = get<F64>(d, "sg_free_idle", N);
    sg_free_any = get<F64>(d, "sg_free_any", N);
    sg_portion = get<F64>(d, "sg_task_portion", T);
    sg_orders = get<I64>(d, "sg_gpu_order", static_cast<std::size_t>(py::len(d["sg_gpu_order"])));
    for (std::size_t h = 0; h < G; ++h) {
      const i64 node = sg_node.data()[h];
      if (node < 0 || node >= in.N) throw py::value_error("allocate_loop: sg_group_node");
    }
    for (py::ssize_t o = 0; o < sg_orders.size(); ++o) {
      const i64 kind = sg_orders.data()[o];
      if (kind != kai::alloc::kGpuPack && kind != kai::alloc::kGpuSpread) {
        throw py::value_error("allocate_loop: sg_gpu_order");
      }
    }
    sg.group_node = sg_node.data();
    sg.group_used = sg_used.data();
    sg.group_releasing = sg_releasing.data();
    sg.group_pipelined = sg_pipelined.data();
    sg.group_tenants = sg_tenants.data();
    sg.group_from_releasing = sg_from_releasing.data();
    sg.free_idle = sg_free_idle.data();
    sg.free_any = sg_free_any.data();
    sg.task_portion = sg_portion.data();
    sg.orders = static_cast<i64>(sg_orders.size());
    sg.order_kinds = sg_orders.data();
  }
  for (i64 c = 0; c < in.C; ++c) {
    if (comps.data()[c] == kai::alloc::kLoadAware && LR == 0) {
      throw py::value_error("allocate_loop: a loadaware score component without la_R");
    }
  }
  Output out;
  if (LR > 0) out.la_existing.assign(la_existing.data(), la_existing.data() + 4 * N * LR);
  out.idle.assign(idle.data(), idle.data() + N * R);
  out.releasing.assign(releasing.data(), releasing.data() + N * R);
  out.used.assign(used.data(), used.data() + N * R);
  out.q_alloc.assign(q_alloc.data(), q_alloc.data() + Q * 3);
  out.q_alloc_np.assign(q_alloc_np.data(), q_alloc_np.data() + Q * 3);
  {
    py::gil_scoped_release nogil;
    kai::alloc::run(in, out);
  }
  py::dict r;
  r["idle"] = to_array(out.idle, R);
  r["releasing"] = to_array(out.releasing, R);
  r["used"] = to_array(out.used, R);
  r["q_alloc"] = to_array(out.q_alloc, 3);
  r["q_alloc_np"] = to_array(out.q_alloc_np, 3);
  r["q_events"] = to_array(out.q_events);
  r["att_job"] = to_array(out.att_job);
  r["att_kind"] = to_array(out.att_kind);
  r["att_first"] = to_array(out.att_first);
  r["att_count"] = to_array(out.att_count);
  r["att_info"] = to_array(out.att_info);
  r["att_flags"] = to_array(out.att_flags);
  r["att_active"] = to_array(out.att_active);
  r["att_vec"] = to_array(out.att_vec, 6);
  r["att_fail"] = to_array(out.att_fail, static_cast<std::size_t>(1 + in.P + in.la.reasons));
  r["att_short"] = to_array(out.att_short, static_cast<std::size_t>(in.R));
  r["att_free"] = to_array(out.att_free, static_cast<std::size_t>(in.R));
  r["pl_task"] = to_array(out.pl_task);
  r["pl_node"] = to_array(out.pl_node);
  r["pl_pipe"] = to_array(out.pl_pipe);
  if (LR > 0) r["la_existing"] = to_array(out.la_existing, LR);
  r["aborted"] = out.aborted;
  if (in.sg.on) {
    r["pl_group"] = to_array(out.pl_group);
    r["sg_node"] = to_array(out.sg_node);
    r["sg_used"] = to_array(out.sg_used);
    r["sg_releasing"] = to_array(out.sg_releasing);
    r["sg_pipelined"] = to_array(out.sg_pipelined);
    r["sg_tenants"] = to_array(out.sg_tenants);
    r["sg_from_releasing"] = to_array(out.sg_from_releasing);
    r["sg_alive"] = to_array(out.sg_alive);
    r["sg_seq"] = to_array(out.sg_seq);
    r["sg_opener"] = to_array(out.sg_opener);
    r["att_device_short"] = to_array(out.att_device_short);
    r["att_device_room"] = to_array(out.att_device_room);
  }
  return r;
}

// The array attribute ``name`` of ``o`` (field), of ``expect`` values.
template <typename A>
A sized(const py::object& o, const char* name, std::size_t expect) {
  A a = field<A>(o, name);
  require_size(a, expect, "replace_victims", name);
  return a;
}

// Every value of ``a`` in [lo, hi).
void in_range(const I64& a, i64 lo, i64 hi, const char* name) {
  const i64* v = a.data();
  for (py::ssize_t k = 0; k < a.size(); ++k) {
    if (v[k] < lo || v[k] >= hi) {
      throw py::value_error(std::string("replace_victims: ") + name + " out of range");
    }
  }
}

// Offsets: starting at 0, never decreasing, ending at most at ``end``.
void ascending(const I64& a, i64 end, const char* name) {
  const i64* v = a.data();
  for (py::ssize_t k = 0; k < a.size(); ++k) {
    if (v[k] < 0 || v[k] > end || (k > 0 && v[k] < v[k - 1])) {
      throw py::value_error(std::string("replace_victims: ") + name + " not offsets");
    }
  }
}

template <typename A>
void check_size(const A& a, std::size_t expect, const char* name) {
  require_size(a, expect, "NodePicker", name);
}

// The loop's node choice for one task at a time, on the session's matrices as they are
// (kai.actions.fast_allocate.NodePicker): what does not change within a session is
// kept here, the rest is passed per call.
class NodePicker {
 public:
  NodePicker(F64 allocatable, F64 cap_gpu, I64 comps, F64 comp_scale, i64 gpu, i64 cpu,
             bool gpu_binpack, bool cpu_binpack)
      : allocatable_(std::move(allocatable)),
        cap_gpu_(std::move(cap_gpu)),
        comps_(std::move(comps)),
        comp_scale_(std::move(comp_scale)) {
    require_ndim(allocatable_, 2, "allocatable");
    in_.N = static_cast<i64>(allocatable_.shape(0));
    in_.R = static_cast<i64>(allocatable_.shape(1));
    check_size(cap_gpu_, static_cast<std::size_t>(in_.N), "cap_gpu");
    in_.C = static_cast<i64>(comps_.size());
    check_size(comp_scale_, static_cast<std::size_t>(in_.C), "comp_scale");
    if (in_.C > kai::alloc::kMaxComponents) throw py::value_error("NodePicker: comps");
    for (i64 c = 0; c < in_.C; ++c) {
      if (comps_.data()[c] == kai::alloc::kLoadAware) {
        throw py::value_error("NodePicker: no load-aware score (it follows the pods placed)");
      }
    }
    if (gpu < 0 || gpu >= in_.R || cpu < 0 || cpu >= in_.R) {
      throw py::value_error("NodePicker: resource column out of range");
    }
    in_.gpu = gpu;
    in_.cpu = cpu;
    in_.gpu_binpack = gpu_binpack;
    in_.cpu_binpack = cpu_binpack;
    in_.allocatable = allocatable_.data();
    in_.cap_gpu = cap_gpu_.data();
    in_.comps = comps_.data();
    in_.comp_scale = comp_scale_.data();
    in_.T = 1;
    in_.S = 1;
    in_.task_sig = &zero_;
  }

  // (node, fits on idle capacity there); node -1 when no node may take the task.
  py::tuple pick(const F64& idle, const F64& releasing, const F64& request, const Bool& masks,
                 i64 nominated, double portion, const F64& shared_idle, const F64& shared_any,
                 const py::object& within) {
    const auto N = static_cast<std::size_t>(in_.N), R = static_cast<std::size_t>(in_.R);
    check_size(idle, N * R, "idle");
    check_size(releasing, N * R, "releasing");
    check_size(request, R, "request");
    if (masks.size() % static_cast<py::ssize_t>(N == 0 ? 1 : N) != 0) {
      throw py::value_error("NodePicker: masks");
    }
    Input in = in_;
    in.P = N == 0 ? 0 : static_cast<i64>(static_cast<std::size_t>(masks.size()) / N);
    in.pred = masks.data();
    in.task_req = request.data();
    in.task_nom = &nominated;
    Bool within_mask;
    if (!within.is_none()) {
      within_mask = py::cast<Bool>(within);
      check_size(within_mask, N, "within");
      in.within = within_mask.data();
    }
    if (portion > 0.0) {
      check_size(shared_idle, N, "shared_idle");
      check_size(shared_any, N, "shared_any");
      in.sg.on = true;
      in.sg.free_idle = shared_idle.data();
      in.sg.free_any = shared_any.data();
      in.sg.task_portion = &portion;
    }
    bool on_idle = false;
    const i64 node = kai::alloc::select_node(in, idle.data(), releasing.data(), &on_idle);
    return py::make_tuple(node, on_idle);
  }

  const Input& input() const { return in_; }

  // kai/simulation.hpp: ``sim`` is a kai.actions.solvers.replacement.ReplacementArrays.
  py::tuple replace_victims(const py::object& sim) {
    const auto N = static_cast<std::size_t>(in_.N), R = static_cast<std::size_t>(in_.R);
    kai::alloc::Replacement r;
    const F64 idle = sized<F64>(sim, "idle", N * R), releasing = sized<F64>(sim, "releasing", N * R);
    const Bool within = sized<Bool>(sim, "within", N);
    const Bool masks = field<Bool>(sim, "masks");
    r.P = py::cast<i64>(attr(sim, "predicates"));
    // [K, P, N]: the number of constraint sets is read from the shape, since with no
    // predicate (P = 0) the masks hold no value at all.
    require_ndim(masks, 3, "replace_victims: masks");
    if (r.P < 0 || masks.shape(1) != r.P || static_cast<std::size_t>(masks.shape(2)) != N) {
      throw py::value_error("replace_victims: masks");
    }
    const i64 K = static_cast<i64>(masks.shape(0));
    r.count_slack = py::cast<double>(attr(sim, "count_slack"));
    r.alike_from = py::cast<i64>(attr(sim, "alike_from"));
    r.every_victim = py::cast<bool>(attr(sim, "every_victim"));
    const F64 q_alloc = field<F64>(sim, "q_alloc");
    const auto Q = static_cast<std::size_t>(q_alloc.size()) / 3;
    r.Q = static_cast<i64>(Q);
    const F64 q_alloc_np = sized<F64>(sim, "q_alloc_np", Q * 3),
              deserved = sized<F64>(sim, "q_deserved", Q * 3), limit = sized<F64>(sim, "q_limit", Q * 3),
              fair = sized<F64>(sim, "q_fair", Q * 3),
              allocatable = sized<F64>(sim, "q_allocatable", Q * 3), total = sized<F64>(sim, "total", 3);
    const I64 priority = sized<I64>(sim, "q_priority", Q), rank = sized<I64>(sim, "q_rank", Q),
              path_start = sized<I64>(sim, "q_path_start", Q + 1);
    const I64 path = field<I64>(sim, "q_path");
    const I64 kid_start = sized<I64>(sim, "kid_start", Q + 2);
    const I64 kids = field<I64>(sim, "kids");
    const I64 base_start = sized<I64>(sim, "base_start", Q + 1);
    const F64 base_request = field<F64>(sim, "base_request");
    const auto B = static_cast<std::size_t>(base_request.size()) / 3;
    const Bool base_skipped = sized<Bool>(sim, "base_skipped", B);
    const I64 p_leaf = field<I64>(sim, "p_leaf");
    const auto M = static_cast<std::size_t>(p_leaf.size());
    const I64 own_start = sized<I64>(sim, "own_start", Q + 1), own = sized<I64>(sim, "own", M),
              p_before = sized<I64>(sim, "p_before", M),
              p_task_start = sized<I64>(sim, "p_task_start", M + 1),
              p_np_count = sized<I64>(sim, "p_np_count", M);
    const F64 p_request = sized<F64>(sim, "p_request", M * 3),
              p_gpu_need = sized<F64>(sim, "p_gpu_need", M);
    const Bool p_np_charge = sized<Bool>(sim, "p_np_charge", M);
    const I64 t_mask = field<I64>(sim, "t_mask");
    const auto T = static_cast<std::size_t>(t_mask.size());
    const F64 t_req = sized<F64>(sim, "t_req", T * R), t_qvec = sized<F64>(sim, "t_qvec", T * 3);
    const I64 t_nominated = sized<I64>(sim, "t_nominated", T),
              t_evicted_from = sized<I64>(sim, "t_evicted_from", T),
              t_vacated_at = sized<I64>(sim, "t_vacated_at", T),
              t_held_at = sized<I64>(sim, "t_held_at", T), t_also = sized<I64>(sim, "t_also", T);
    const Bool t_pipelined_back = sized<Bool>(sim, "t_pipelined_back", T);
    const I64 v_node = field<I64>(sim, "v_node");
    const auto V = static_cast<std::size_t>(v_node.size());
    const F64 v_req = sized<F64>(sim, "v_req", V * R), v_qvec = sized<F64>(sim, "v_qvec", V * 3);
    const I64 v_leaf = sized<I64>(sim, "v_leaf", V);
    const Bool v_np = sized<Bool>(sim, "v_np", V), v_pipelined = sized<Bool>(sim, "v_pipelined", V);
    const I64 v_held = sized<I64>(sim, "v_held", V);
    r.preemptor = py::cast<i64>(attr(sim, "preemptor"));
    // Indices are checked here: the kernel trusts them.
    const auto q = static_cast<i64>(Q), n = static_cast<i64>(N);
    in_range(path, 0, q, "q_path");
    ascending(path_start, static_cast<i64>(path.size()), "q_path_start");
    in_range(kids, 0, q, "kids");
    ascending(kid_start, static_cast<i64>(kids.size()), "kid_start");
    ascending(base_start, static_cast<i64>(B), "base_start");
    ascending(own_start, static_cast<i64>(M), "own_start");
    in_range(own, 0, static_cast<i64>(M), "own");
    in_range(p_leaf, 0, q, "p_leaf");
    in_range(p_before, 0, static_cast<i64>(B) + 1, "p_before");
    ascending(p_task_start, static_cast<i64>(T), "p_task_start");
    in_range(t_mask, 0, K, "t_mask");
    in_range(t_nominated, -1, n, "t_nominated");
    in_range(t_evicted_from, -1, n, "t_evicted_from");
    in_range(t_vacated_at, -1, n, "t_vacated_at");
    in_range(t_held_at, -1, n, "t_held_at");
    in_range(t_also, -1, n, "t_also");
    in_range(v_held, -1, n, "v_held");
    in_range(v_node, 0, n, "v_node");
    in_range(v_leaf, 0, q, "v_leaf");
    if (r.preemptor < 0 || r.preemptor >= static_cast<i64>(M)) {
      throw py::value_error("replace_victims: preemptor");
    }
    r.idle = idle.data();
    r.releasing = releasing.data();
    r.within = within.data();
    r.masks = masks.data();
    r.q_alloc = q_alloc.data();
    r.q_alloc_np = q_alloc_np.data();
    r.rules.deserved = deserved.data();
    r.rules.limit = limit.data();
    r.rules.fair = fair.data();
    r.rules.allocatable = allocatable.data();
    r.rules.priority = priority.data();
    r.rules.rank = rank.data();
    r.rules.total = total.data();
    r.rules.path_start = path_start.data();
    r.rules.path = path.data();
    r.kid_start = kid_start.data();
    r.kids = kids.data();
    r.base_start = base_start.data();
    r.base_request = base_request.data();
    r.base_skipped = base_skipped.data();
    r.M = static_cast<i64>(M);
    r.own_start = own_start.data();
    r.own = own.data();
    r.p_before = p_before.data();
    r.p_request = p_request.data();
    r.p_leaf = p_leaf.data();
    r.p_task_start = p_task_start.data();
    r.p_np_count = p_np_count.data();
    r.p_np_charge = p_np_charge.data();
    r.p_gpu_need = p_gpu_need.data();
    r.t_req = t_req.data();
    r.t_qvec = t_qvec.data();
    r.t_mask = t_mask.data();
    r.t_nominated = t_nominated.data();
    r.t_evicted_from = t_evicted_from.data();
    r.t_vacated_at = t_vacated_at.data();
    r.t_pipelined_back = t_pipelined_back.data();
    r.t_held_at = t_held_at.data();
    r.t_also = t_also.data();
    r.V = static_cast<i64>(V);
    r.v_req = v_req.data();
    r.v_qvec = v_qvec.data();
    r.v_node = v_node.data();
    r.v_leaf = v_leaf.data();
    r.v_np = v_np.data();
    r.v_pipelined = v_pipelined.data();
    r.v_held = v_held.data();
    std::vector<i64> steps;  // recorded always: a placed verdict's are replayed
    r.steps = &steps;
    // The node rows it ends on, when asked (a check of the statement the steps make).
    const bool with_rows = py::cast<bool>(attr(sim, "with_rows"));
    std::vector<double> final_idle, final_releasing;
    if (with_rows) {
      r.final_idle = &final_idle;
      r.final_releasing = &final_releasing;
    }
    kai::alloc::Replaced outcome;
    {
      py::gil_scoped_release release;
      outcome = kai::alloc::replace_victims(in_, r);
    }
    py::object recorded = py::none();
    const bool placed = outcome == kai::alloc::Replaced::kPlaced ||
                        outcome == kai::alloc::Replaced::kVictimLeft;
    if (placed) {
      const auto rows = static_cast<py::ssize_t>(steps.size() / 3);
      py::array_t<i64> out({rows, static_cast<py::ssize_t>(3)});
      if (!steps.empty()) std::memcpy(out.mutable_data(), steps.data(), steps.size() * sizeof(i64));
      recorded = std::move(out);
    }
    if (placed && with_rows) {
      const auto n = static_cast<py::ssize_t>(N), width = static_cast<py::ssize_t>(R);
      py::array_t<double> idle_out({n, width}), releasing_out({n, width});
      std::memcpy(idle_out.mutable_data(), final_idle.data(), N * R * sizeof(double));
      std::memcpy(releasing_out.mutable_data(), final_releasing.data(), N * R * sizeof(double));
      return py::make_tuple(static_cast<int>(outcome), recorded, idle_out, releasing_out);
    }
    return py::make_tuple(static_cast<int>(outcome), recorded);
  }

 private:
  F64 allocatable_, cap_gpu_;
  I64 comps_;
  F64 comp_scale_;
  Input in_;
  i64 zero_ = 0;
};

// NodePicker.pick for pods alike placed one after another on the same nodes (a
// simulation placing a job's many pods): the nodes are grouped by score inputs, as the
// allocate loop does, and only the nodes reported changed are read again.  Holds the
// predicate masks of one constraint set and the nodes ``within``; the picker it was made
// from is kept alive by the binding.
class AlikePicks {
 public:
  AlikePicks(const NodePicker& picker, Bool masks, Bool within)
      : in_(picker.input()), masks_(std::move(masks)), within_(std::move(within)) {
    const auto N = static_cast<std::size_t>(in_.N);
    check_size(within_, N, "within");
    if (N == 0 || masks_.size() % static_cast<py::ssize_t>(N) != 0) {
      throw py::value_error("NodePicker.alike: masks");
    }
    in_.P = static_cast<i64>(static_cast<std::size_t>(masks_.size()) / N);
    in_.pred = masks_.data();
    in_.within = within_.data();
    for (i64 n = 0; n < in_.N; ++n) {
      if (in_.within[n]) within_nodes_.push_back(n);
    }
    in_.within_nodes = within_nodes_.data();
    in_.within_count = static_cast<i64>(within_nodes_.size());
    in_.task_nom = &nominated_;
    chooser_ = std::make_unique<kai::alloc::NodeChooser>(in_);
  }

  py::tuple pick(const F64& idle, const F64& releasing, const F64& request, i64 nominated) {
    const auto N = static_cast<std::size_t>(in_.N), R = static_cast<std::size_t>(in_.R);
    check_size(idle, N * R, "idle");
    check_size(releasing, N * R, "releasing");
    check_size(request, R, "request");
    in_.task_req = request.data();
    nominated_ = nominated;
    bool on_idle = false;
    const i64 node = chooser_->choose_alike(idle.data(), releasing.data(), &on_idle);
    return py::make_tuple(node, on_idle);
  }

  void changed(i64 n) {
    if (n < 0 || n >= in_.N) throw py::index_error("NodePicker.alike: node out of range");
    chooser_->changed(n);
  }

 private:
  Input in_;  // the chooser reads it at each pick: set before it is made, never moved
  Bool masks_, within_;
  std::vector<i64> within_nodes_;
  i64 nominated_ = -1;
  std::unique_ptr<kai::alloc::NodeChooser> chooser_;
};

}  // namespace

void register_allocate(py::module_& m) {
  m.def("allocate_loop", &allocate_loop, py::arg("inputs"),
        "The allocate action's loop for the built-in plugins (kai.actions.fast_allocate).");
  py::class_<AlikePicks>(m, "AlikePicks",
                         "NodePicker.pick for pods alike, the nodes grouped by score inputs.")
      .def("pick", &AlikePicks::pick, py::arg("idle"), py::arg("releasing"),
           py::arg("request"), py::arg("nominated"))
      .def("changed", &AlikePicks::changed, py::arg("node"));
  py::class_<NodePicker>(m, "NodePicker",
                         "The allocate loop's node choice for one task at a time.")
      .def(py::init<F64, F64, I64, F64, i64, i64, bool, bool>(), py::arg("allocatable"),
           py::arg("cap_gpu"), py::arg("comps"), py::arg("comp_scale"), py::arg("gpu_col"),
           py::arg("cpu_col"), py::arg("gpu_binpack"), py::arg("cpu_binpack"))
      .def("pick", &NodePicker::pick, py::arg("idle"), py::arg("releasing"), py::arg("request"),
           py::arg("masks"), py::arg("nominated"), py::arg("portion"), py::arg("shared_idle"),
           py::arg("shared_any"), py::arg("within"))
      .def(
          "alike",
          [](const NodePicker& picker, Bool masks, Bool within) {
            return std::make_unique<AlikePicks>(picker, std::move(masks), std::move(within));
          },
          py::arg("masks"), py::arg("within"), py::keep_alive<0, 1>(),
          "pick for pods alike placed one after another on these masks and nodes: "
          "report each node whose rows change between picks with changed().")
      .def("replace_victims", &NodePicker::replace_victims, py::arg("sim"),
           "A simulation's re-placement (kai/simulation.hpp): (outcome, steps).  Outcome "
           "0: the preemptor is not placed whole in its turn, 1: it is (and every victim, "
           "followed to its end), 2: it is and a victim is not, 3: undecided.  Steps (for "
           "outcomes 1 and 2, else None): [K, 3] int64 rows (kind, a, b), "
           "kai::alloc::Step.");
}

}  // namespace kai::bind
