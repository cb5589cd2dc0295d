// Ring rounds driven from C++, as Gloo's own all-reduce drives them (experiments/engine_rounds.py).
//
// A round: every rank sends a message to its right neighbour and receives one from its left,
// the message in two halves with both in flight at once (Gloo's ring keeps two segments in
// flight so that one travels while the other is reduced), and the next round passes on what
// arrived. The loop runs without the Python interpreter and with the GIL released, so a round
// costs what the engine's transport and the ranks' wake-ups cost, as in Gloo's C++ ring, not
// what a Python-driven round adds to them (experiments/ring_probe.py times both).
#include <torch/extension.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <chrono>
#include <utility>
#include <vector>

// Seconds from the start to the end of each of `rounds` rounds.
std::vector<double> chain_marks(const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                                at::Tensor outgoing, at::Tensor incoming, int64_t right,
                                int64_t left, int64_t rounds, int64_t tag) {
  TORCH_CHECK(outgoing.numel() == incoming.numel() && outgoing.numel() >= 2,
              "chain_marks: two buffers of the same size, at least 2 elements");
  py::gil_scoped_release no_gil;
  const int64_t half = outgoing.numel() / 2;
  auto split = [half](const at::Tensor& t) {
    return std::pair<std::vector<at::Tensor>, std::vector<at::Tensor>>{
        {t.narrow(0, 0, half)}, {t.narrow(0, half, t.numel() - half)}};
  };
  auto out = split(outgoing), in = split(incoming);
  std::vector<double> marks;
  marks.reserve(rounds);
  const auto start = std::chrono::steady_clock::now();
  for (int64_t r = 0; r < rounds; ++r) {
    auto receive_first = group->recv(in.first, static_cast<int>(left), static_cast<int>(tag));
    auto receive_second = group->recv(in.second, static_cast<int>(left), static_cast<int>(tag + 1));
    auto send_first = group->send(out.first, static_cast<int>(right), static_cast<int>(tag));
    auto send_second = group->send(out.second, static_cast<int>(right), static_cast<int>(tag + 1));
    receive_first->wait();
    send_first->wait();
    receive_second->wait();
    send_second->wait();
    std::swap(out, in);  // pass on what arrived, as a ring does
    marks.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return marks;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("chain_marks", &chain_marks, "Ring rounds in two halves, driven from C++");
}
