// A two-layer MLP built from raw ops, trained with manual SGD (momentum 0.9) to fit
// y = sin(3x) + 0.5x.
// Prints the loss as it falls; exits non-zero if it does not fall by 10x.
#include <cstdio>

#include "tessera/tessera.h"

using namespace tessera;

int main() {
  manual_seed(0);
  const int64_t N = 256, H = 64;
  Tensor x = rand({N, 1}) * 4.0 - 2.0;
  Tensor y = sin(x * 3.0) + x * 0.5;

  // Parameters: [1 -> H] tanh [H -> 1].
  Tensor w1 = (randn({1, H}) * 1.0).requires_grad_();
  Tensor b1 = zeros({H}, TensorOptions().with_requires_grad());
  Tensor w2 = (randn({H, 1}) * (1.0 / 8.0)).requires_grad_();
  Tensor b2 = zeros({1}, TensorOptions().with_requires_grad());
  TensorList params{w1, b1, w2, b2};
  TensorList velocity;
  for (const Tensor& p : params) velocity.push_back(zeros_like(p));

  const double lr = 0.03;
  double first = 0, last = 0;
  for (int step = 0; step <= 2000; ++step) {
    Tensor h = tanh(matmul(x, w1) + b1);
    Tensor pred = matmul(h, w2) + b2;
    Tensor loss = mean(square(pred - y));
    for (Tensor& p : params) p.set_grad(Tensor());
    loss.backward();
    {
      autograd::NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) {
        velocity[i].mul_(0.9).add_(params[i].grad());  // v = 0.9 v + g
        params[i].sub_(velocity[i], lr);                 // p -= lr v
      }
    }
    last = loss.item<double>();
    if (step == 0) first = last;
    if (step % 250 == 0) std::printf("step %4d  loss %.5f\n", step, last);
  }
  std::printf("loss fell from %.4f to %.4f\n", first, last);
  return last < first / 10 ? 0 : 1;
}
