#include "tessera/autograd/engine.h"

#include <optional>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "runtime/autocast_cast.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/autograd/node.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/reduce.h"
#include "tessera/runtime/profiler.h"

namespace tessera::autograd {

namespace {

// Nesting depth of backward passes on this thread, and the callbacks of the outermost one.
thread_local int t_backward_depth = 0;
thread_local std::vector<std::function<void()>> t_callbacks;
thread_local uint64_t t_passes = 0;  // outermost passes begun on this thread

// Counts a pass; the outermost one runs the queued callbacks when it completes and drops them
// when it throws.
class BackwardPassScope {
 public:
  BackwardPassScope() {
    if (t_backward_depth++ == 0) ++t_passes;
  }
  ~BackwardPassScope() {
    if (--t_backward_depth == 0) t_callbacks.clear();
  }
  BackwardPassScope(const BackwardPassScope&) = delete;
  BackwardPassScope& operator=(const BackwardPassScope&) = delete;
  void complete() {
    if (t_backward_depth != 1) return;
    // A callback may queue another (run in order); depth stays 1 so they may run backward too.
    for (size_t i = 0; i < t_callbacks.size(); ++i) {
      std::function<void()> fn = std::move(t_callbacks[i]);
      fn();
    }
    t_callbacks.clear();
  }
};

struct GraphTask {
  std::unordered_map<Node*, int> dependencies;
  std::unordered_map<Node*, TensorList> buffers;
  std::unordered_set<Node*> exec;  // nodes whose apply() runs
};

size_t num_grad_inputs(Node* n) { return std::max<size_t>(n->output_meta().size(), 1); }

// Post-order of the nodes reachable from roots, without recursion.
std::vector<Node*> post_order(const std::vector<Edge>& roots) {
  std::vector<Node*> order;
  std::unordered_set<Node*> seen;
  std::vector<std::pair<Node*, size_t>> stack;
  for (const Edge& r : roots) {
    if (!r.valid() || !seen.insert(r.fn.get()).second) continue;
    stack.emplace_back(r.fn.get(), 0);
    while (!stack.empty()) {
      auto& [node, child] = stack.back();
      if (child < node->next_edges().size()) {
        Node* next = node->next_edges()[child++].fn.get();
        if (next && seen.insert(next).second) stack.emplace_back(next, 0);
      } else {
        order.push_back(node);
        stack.pop_back();
      }
    }
  }
  return order;
}

// Sums the gradients a node's input receives; without create_graph, into the first one's buffer
// when nothing else sees it (a tied embedding's [V, C] gradient is not copied once more).
void accumulate(TensorList& buffer, uint32_t input_nr, Tensor grad) {
  if (buffer.size() <= input_nr) buffer.resize(input_nr + 1);
  Tensor& slot = buffer[input_nr];
  if (!slot.defined()) {
    slot = std::move(grad);
  } else if (!GradMode::is_enabled() && slot.dtype() == grad.dtype() &&
             slot.sizes() == grad.sizes() && is_exclusive_grad(slot)) {
    add_(slot, grad);
  } else {
    slot = add(slot, grad);
  }
}

void check_anomaly(Node* n, const TensorList& outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& g = outputs[i];
    if (!g.defined() || !g.is_floating_point()) continue;
    NoGradGuard no_grad;
    TESSERA_CHECK(all(isfinite(g)).item<bool>(), RuntimeError, "[autograd] Function '", n->name(),
                  "' returned nan or inf values in its output ", i,
                  " (anomaly mode is on; the forward op that recorded it produced them)");
  }
}

void check_grad_shape(Node* target, uint32_t input_nr, const Tensor& grad, Node* producer) {
  const Shape* expected = nullptr;
  if (target->is_accumulate_grad())
    expected = &static_cast<AccumulateGrad*>(target)->variable().sizes();
  else if (input_nr < target->output_meta().size())
    expected = &target->output_meta()[input_nr].sizes;
  TESSERA_CHECK(!expected || *expected == grad.sizes(), RuntimeError, "[autograd] Function '",
                producer ? producer->name() : std::string("backward"),
                "' returned a gradient of shape ", grad.sizes(), " where ", *expected,
                " was expected (input to ", target->name(), ")");
}

// Runs the graph from roots. With captures, returns the gradient arriving at each captured edge
// and runs only the nodes on a path to one; otherwise accumulates into leaves.
TensorList execute(const std::vector<Edge>& roots, const TensorList& root_grads, bool keep_graph,
                   bool create_graph, const std::vector<Edge>* captures) {
  BackwardPassScope pass;
  GradModeGuard grad_mode(create_graph);
  // Gradients run in the dtypes the forward saved, as in PyTorch; autocast stays off.
  tessera::detail::NoAutocastScope no_autocast;
  GraphTask task;
  std::vector<Node*> order = post_order(roots);
  if (captures) {
    std::unordered_set<Node*> targets, needed;
    for (const Edge& c : *captures) targets.insert(c.fn.get());
    for (Node* n : order) {  // children come before parents in post-order
      bool leads = false;
      for (const Edge& e : n->next_edges())
        leads = leads || (e.valid() && needed.count(e.fn.get()));
      if (leads && !n->is_accumulate_grad()) task.exec.insert(n);
      if (leads || targets.count(n)) needed.insert(n);
    }
  } else {
    task.exec.insert(order.begin(), order.end());
  }
  for (Node* n : task.exec)
    for (const Edge& e : n->next_edges())
      if (e.valid()) ++task.dependencies[e.fn.get()];

  auto later_first = [](Node* a, Node* b) { return a->sequence_nr() < b->sequence_nr(); };
  std::priority_queue<Node*, std::vector<Node*>, decltype(later_first)> ready(later_first);
  for (size_t i = 0; i < roots.size(); ++i) {
    if (!roots[i].valid()) continue;
    Node* n = roots[i].fn.get();
    check_grad_shape(n, roots[i].input_nr, root_grads[i], nullptr);
    auto [it, fresh] = task.buffers.try_emplace(n, TensorList(num_grad_inputs(n)));
    accumulate(it->second, roots[i].input_nr, root_grads[i]);
    if (fresh && task.dependencies[n] == 0) ready.push(n);
  }

  TensorList captured(captures ? captures->size() : 0);
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    TensorList inputs = std::move(task.buffers[n]);
    task.buffers.erase(n);
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].defined()) inputs[i] = n->run_pre_hooks(static_cast<uint32_t>(i), inputs[i]);
    if (captures) {
      for (size_t k = 0; k < captures->size(); ++k) {
        const Edge& c = (*captures)[k];
        if (c.fn.get() == n && c.input_nr < inputs.size()) captured[k] = inputs[c.input_nr];
      }
    }
    if (!task.exec.count(n)) continue;
    std::optional<profiler::RecordFunction> record;
    if (profiler::Profiler::is_recording())
      record.emplace(n->name(), profiler::EventKind::kBackward);
    TensorList outputs = n->apply(std::move(inputs));
    record.reset();
    if (AnomalyMode::is_enabled()) check_anomaly(n, outputs);
    if (!keep_graph) n->release_saved();
    const auto& edges = n->next_edges();
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& e = edges[i];
      if (!e.valid()) continue;
      Node* next = e.fn.get();
      auto& buffer =
          task.buffers.try_emplace(next, TensorList(num_grad_inputs(next))).first->second;
      if (i < outputs.size() && outputs[i].defined()) {
        check_grad_shape(next, e.input_nr, outputs[i], n);
        accumulate(buffer, e.input_nr, std::move(outputs[i]));
      }
      if (--task.dependencies[next] == 0) ready.push(next);
    }
  }
  pass.complete();
  return captured;
}

// Roots and their seed gradients (ones for scalar outputs).
std::pair<std::vector<Edge>, TensorList> make_roots(const TensorList& tensors,
                                                    const TensorList& grads, std::string_view op) {
  TESSERA_CHECK(grads.empty() || grads.size() == tensors.size(), ValueError, "[", op,
                "] expected one grad per tensor (", tensors.size(), "), got ", grads.size());
  std::vector<Edge> roots;
  TensorList seeds;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    TESSERA_CHECK(t.defined() && t.requires_grad(), RuntimeError, "[", op,
                  "] expected tensors that require grad, got element ", i,
                  " that does not require grad and has no grad_fn");
    Tensor g = grads.empty() ? Tensor() : grads[i];
    if (!g.defined()) {
      TESSERA_CHECK(t.numel() == 1, RuntimeError, "[", op,
                    "] expected a scalar output when no grad is given (grad can be implicitly "
                    "created only for scalar outputs), got shape ",
                    t.sizes());
      g = ones_like(t);
    }
    TESSERA_CHECK(g.sizes() == t.sizes(), ValueError, "[", op, "] expected grad of shape ",
                  t.sizes(), ", got ", g.sizes());
    roots.push_back(gradient_edge(t));
    seeds.push_back(g);
  }
  return {std::move(roots), std::move(seeds)};
}

}  // namespace

void queue_callback(std::function<void()> fn) {
  TESSERA_CHECK(
      t_backward_depth > 0, RuntimeError,
      "[autograd.queue_callback] expected a call during a backward pass, got one outside");
  t_callbacks.push_back(std::move(fn));
}

uint64_t backward_pass_id() { return t_backward_depth > 0 ? t_passes : 0; }

void backward(const TensorList& tensors, const TensorList& grad_tensors, bool retain_graph,
              bool create_graph) {
  auto [roots, seeds] = make_roots(tensors, grad_tensors, "backward");
  execute(roots, seeds, retain_graph || create_graph, create_graph, nullptr);
}

TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs,
                std::optional<bool> retain_graph, bool create_graph, bool allow_unused) {
  auto [roots, seeds] = make_roots(outputs, grad_outputs, "autograd.grad");
  std::vector<Edge> captures;
  for (size_t i = 0; i < inputs.size(); ++i) {
    TESSERA_CHECK(inputs[i].defined() && inputs[i].requires_grad(), RuntimeError,
                  "[autograd.grad] expected inputs that require grad, got input ", i,
                  " that does not");
    captures.push_back(gradient_edge(inputs[i]));
  }
  TensorList result =
      execute(roots, seeds, retain_graph.value_or(create_graph), create_graph, &captures);
  for (size_t i = 0; i < result.size(); ++i) {
    TESSERA_CHECK(result[i].defined() || allow_unused, RuntimeError,
                  "[autograd.grad] expected every input to be used in the graph, got input ", i,
                  " unused; pass allow_unused=true to get an undefined gradient for it");
  }
  return result;
}

}  // namespace tessera::autograd
