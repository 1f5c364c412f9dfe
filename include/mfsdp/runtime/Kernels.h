//===- Kernels.h - Optimizer and data-movement kernels -----------*- C++ -*-===//
//
// The kernels the generated step library calls, with one semantics and two
// implementations: the host twins here (C++ loops, OpenBLAS GEMMs), which
// the tests run, and the CUDA kernels in runtime/cuda (cuBLAS GEMMs), which
// are compiled and linked but never run on machines without a GPU.
//
// Conventions: fp32 masters and optimizer state; `step` counts from 1.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_RUNTIME_KERNELS_H
#define MFSDP_RUNTIME_KERNELS_H

#include <cstdint>

namespace mfsdp::rt {

struct AdamWHyper {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f,
        weightDecay = 0.01f;
};

struct SGDHyper {
  float lr = 1e-2f, momentum = 0.f, weightDecay = 0.f;
  bool nesterov = false;
};

enum class MuonScale : int { MatchRmsAdamW = 0, Original = 1 };

struct MuonHyper {
  float lr = 0.02f, momentum = 0.95f, weightDecay = 0.01f;
  bool nesterov = true;
  int64_t nsSteps = 5;
  MuonScale scale = MuonScale::MatchRmsAdamW;
};

/// Quintic Newton-Schulz coefficients (a, b, c), as in Muon.
inline constexpr float kNsA = 3.4445f, kNsB = -4.7750f, kNsC = 2.0315f;

namespace host {

/// AdamW with decoupled weight decay and bias correction (torch.optim.AdamW):
/// p -= lr*wd*p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
/// p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps).
void adamwStep(float *param, const float *grad, float *m, float *v, int64_t n,
               const AdamWHyper &h, int64_t step);

/// SGD as torch.optim.SGD (weight decay added to the gradient; momentum
/// buffer initialised with the first gradient when `step` is 1).
void sgdStep(float *param, const float *grad, float *buf, int64_t n,
             const SGDHyper &h, int64_t step);

/// Muon momentum (EMA form, torch.optim.Muon): buf = mu*buf + (1-mu)*g;
/// out = nesterov ? g + mu*(buf - g) : buf.
void muonMomentum(const float *grad, float *buf, float *out, int64_t n,
                  float momentum, bool nesterov);

/// Bytes of workspace newtonSchulz needs for a rows x cols matrix.
int64_t newtonSchulzWorkspace(int64_t rows, int64_t cols);

/// X = NS_steps(G): normalise by the Frobenius norm (+1e-7), work on the
/// wide orientation (rows <= cols), repeat A = X X^T, B = b A + c A A,
/// X = a X + B X. `out` may alias `in`. `workspace` holds
/// newtonSchulzWorkspace() bytes.
void newtonSchulz(const float *in, float *out, int64_t rows, int64_t cols,
                  int64_t steps, float *workspace);

/// The Muon parameter update from an orthogonalised update O:
/// p -= lr*wd*p; p -= lr * scale * O, scale = 0.2 sqrt(max(rows, cols))
/// (match_rms_adamw) or sqrt(max(1, rows / cols)) (original).
void muonApply(float *param, const float *ortho, int64_t rows, int64_t cols,
               const MuonHyper &h);

/// One whole Muon step of a matrix on its owner: momentum, Newton-Schulz,
/// update. `scratch` holds rows*cols floats plus newtonSchulzWorkspace().
void muonStep(float *param, const float *grad, float *buf, int64_t rows,
              int64_t cols, const MuonHyper &h, float *scratch);

/// fp32 <-> bf16, round to nearest even; NaN stays NaN.
void castF32ToBF16(const float *in, uint16_t *out, int64_t n);
void castBF16ToF32(const uint16_t *in, float *out, int64_t n);
uint16_t toBF16(float x);
float fromBF16(uint16_t x);

} // namespace host
} // namespace mfsdp::rt

#endif // MFSDP_RUNTIME_KERNELS_H
