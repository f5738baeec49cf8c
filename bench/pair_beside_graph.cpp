// pair_beside_graph/<allocator>/<bytes>: pair/'s loop (pair.hpp) while a CUDA
// graph captured from the same pool lives and holds a block: what an eager
// allocation and free cost beside live graphs (a PyTorch program replaying
// torch.cuda.graph captures between eager steps; docs/graphs.md, "Costs").
// sova's checked pool only: capture needs the stream checks, and the
// runtime's pools serve capture in their own way.
#include "pair.hpp"

#include <sova/sim.hpp>

namespace sova_bench {
namespace {

/// One allocation captured on a stream of its own; the graph is kept (not
/// instantiated: the block is the graph's until it is destroyed).
template <class A>
class HeldGraph {
 public:
  explicit HeldGraph(A& a) : a_(a), stream_(a.sim) {
    const cudaStream_t s = stream_.get();
    check_cuda(a_.sim != nullptr ? a_.sim->begin_capture(s, cudaStreamCaptureModeGlobal)
                                 : cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal),
               "begin capture");
    block_ = a_.allocate(4096, s);
    check_cuda(a_.sim != nullptr ? a_.sim->end_capture(s, &graph_) : cudaStreamEndCapture(s, &graph_),
               "end capture");
  }
  ~HeldGraph() {
    if (a_.sim != nullptr) {
      (void)a_.sim->graph_destroy(graph_);
    } else {
      (void)cudaGraphDestroy(graph_);
    }
    a_.deallocate(block_, stream_.get());
  }
  HeldGraph(const HeldGraph&) = delete;
  HeldGraph& operator=(const HeldGraph&) = delete;

 private:
  A& a_;
  Stream stream_;
  void* block_ = nullptr;
  cudaGraph_t graph_ = nullptr;
};

template <class A>
void BM_pair_beside_graph(benchmark::State& state) {
  run_case<A>(state, [&state](A& a) {
    HeldGraph<A> graph(a);
    pair_loop(state, a);
  });
}

template <class A>
void register_pair_beside_graph() {
  auto* b = benchmark::RegisterBenchmark(case_name<A>("pair_beside_graph").c_str(), BM_pair_beside_graph<A>);
  for (long bytes : {256L, 4L << 10, 1L << 20}) b->Arg(bytes);
  b->UseRealTime()->Unit(benchmark::kNanosecond);
}

[[maybe_unused]] const bool registered = [] {
  register_pair_beside_graph<SovaPool>();
  register_pair_beside_graph<SovaPoolSim>();
  return true;
}();

}  // namespace
}  // namespace sova_bench
