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

#include "mfsdp/Vocabulary.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace mfsdp::rt {

// These structs cross to the CUDA backend's library as their C twins
// (BackendTable.h: mfsdp_rt_*_hyper, mfsdp_rt_block_grid, converted in
// runtime/common/BackendTable.cpp): a field added here is added there.
struct AdamWHyper {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f,
        weightDecay = 0.01f;
};

struct SGDHyper {
  float lr = 1e-2f, momentum = 0.f, weightDecay = 0.f;
  bool nesterov = false;
};

/// One tensor of a fused optimizer step (host::adamwMulti, sgdMulti and
/// their CUDA twins): its buffers, its element count, and its own
/// hyperparameters and step, so that the tensors of one call may differ in
/// any of them (weight decay off for norms and biases, a group's learning
/// rate). A tensor of count 0 is skipped; its pointers are not read.
struct AdamWTensor {
  float *param = nullptr;
  const float *grad = nullptr;
  float *m = nullptr, *v = nullptr;
  int64_t count = 0;
  AdamWHyper h;
  int64_t step = 1;
};

struct SGDTensor {
  float *param = nullptr;
  const float *grad = nullptr;
  float *buf = nullptr;
  int64_t count = 0;
  SGDHyper h;
  int64_t step = 1;
};

/// Muon's update scale for a rows x cols matrix (torch.optim.Muon's
/// adjust_lr_fn): 0.2 sqrt(max(rows, cols)) (match_rms_adamw),
/// sqrt(max(1, rows / cols)) (original) or sqrt(rows / cols)
/// (spectral_unclamped).
enum class MuonScale : int { MatchRmsAdamW = 0, Original = 1, SpectralUnclamped = 2 };

inline float muonScaleFactor(int64_t rows, int64_t cols, MuonScale scale) {
  const float ratio = static_cast<float>(rows) / static_cast<float>(cols);
  switch (scale) {
  case MuonScale::MatchRmsAdamW:
    return 0.2f * std::sqrt(static_cast<float>(std::max(rows, cols)));
  case MuonScale::Original:
    return std::sqrt(std::max(1.f, ratio));
  default:
    return std::sqrt(ratio);
  }
}

/// How Newton-Schulz scales its input G before the iterations.
enum class NsNorm : int {
  AddEps = 0, ///< X = G / (||G||_F + eps), as Muon's reference code
  Clamp = 1,  ///< X = G / max(||G||_F, eps), as torch.optim.Muon
};

/// The precision of Newton-Schulz's products (mfsdp/Vocabulary.h,
/// MFSDP_NS_PRECISION_LIST); the same choice means the same numbers (up to
/// the order of the fp32 sums) on every backend:
///  - FP32: fp32 operands, fp32 accumulation, fp32 results;
///  - BF16: as torch.optim.Muon: X, A and B are held in bf16 (round to
///    nearest even); each product takes bf16 operands and accumulates in
///    fp32, and its fused combination (A = X X^T, B = b A + c A A,
///    X = a X + B X) is rounded once to bf16. The host emulates it exactly:
///    a product of two bf16 values is exact in fp32, so an fp32 product of
///    bf16-rounded operands is a bf16 product with fp32 accumulation.
using NsPrecision = ::mfsdp::NsPrecision;

/// How Newton-Schulz forms its products (the same values up to rounding).
enum class NsForm : int {
  /// X X^T and A A (A is symmetric) as symmetric rank-k products, one
  /// triangle computed and mirrored: 3 s^2 l + s^3 FLOPs per iteration
  /// (s = min(rows, cols), l = max(rows, cols)).
  Syrk = 0,
  /// Three general products: 4 s^2 l + 2 s^3 FLOPs per iteration.
  Gemm = 1,
};

/// Quintic Newton-Schulz: `steps` times A = X X^T, B = b A + c A A,
/// X = a X + B X, after the normalisation `norm` with `eps`. The defaults
/// are Muon's (a, b, c) = (3.4445, -4.7750, 2.0315), 5 steps, eps 1e-7,
/// fp32 products in the symmetric form.
struct NewtonSchulzHyper {
  int64_t steps = 5;
  float a = 3.4445f, b = -4.7750f, c = 2.0315f;
  float eps = 1e-7f;
  NsNorm norm = NsNorm::AddEps;
  NsPrecision precision = NsPrecision::FP32;
  NsForm form = NsForm::Syrk;
  /// The CUDA backend's symmetric products (cuBLAS has no bf16 syrk) are
  /// one GEMM per strip of this many rows over the tiles on and below the
  /// diagonal; 0 takes the default (cuda::syrkStripRows). The host ignores
  /// it (OpenBLAS ssyrk). It changes the speed, never the values beyond
  /// the order of the fp32 sums.
  int64_t syrkStrip = 0;
};

struct MuonHyper {
  float lr = 0.02f, momentum = 0.95f, weightDecay = 0.01f;
  bool nesterov = true;
  NewtonSchulzHyper ns;
  MuonScale scale = MuonScale::MatchRmsAdamW;
};

/// The rows of each GEMM of the CUDA backend's symmetric product of side n
/// (NsForm::Syrk) when NewtonSchulzHyper::syrkStrip is 0. Measured on one
/// H100 (docs/benchmarks.md, "CUDA optimizer kernels against PyTorch's"):
/// short strips leave the tensor cores idle on bf16 (at 4096, 1024-row
/// strips took 3.07 ms against 3.80 ms for 256-row ones), while fp32 GEMMs
/// are efficient at 256-512 rows and longer strips only add the tiles above
/// the diagonal; half the side below those caps was best at 1024.
inline int64_t syrkStripRows(int64_t n, NsPrecision precision) {
  const int64_t cap = precision == NsPrecision::BF16 ? 1024 : 512;
  return std::clamp<int64_t>(n / 2, 256, cap);
}

/// The kernels the CUDA backend launches for one Newton-Schulz call on a
/// rows x cols matrix in the symmetric form with the default strips
/// (runtime/cuda/Kernels.cu, newtonSchulz): the norm's memset and sum, the
/// normalisation and the final store, and per iteration the two symmetric
/// products (one GEMM per strip and one mirror each), two copies and one
/// GEMM. What the cost model prices as latency beside the FLOPs.
inline int64_t newtonSchulzKernels(int64_t rows, int64_t cols, int64_t steps,
                                   NsPrecision precision) {
  if (rows <= 0 || cols <= 0 || steps <= 0)
    return 0;
  const int64_t s = std::min(rows, cols);
  const int64_t strip = std::clamp<int64_t>(syrkStripRows(s, precision), 1, s);
  const int64_t strips = (s + strip - 1) / strip;
  return 4 + steps * (2 * strips + 5);
}

#if defined(__CUDACC__)
#define MFSDP_HOST_DEVICE __host__ __device__
#else
#define MFSDP_HOST_DEVICE
#endif

/// A rows x cols tensor tiled by blockRows x blockCols blocks (a block
/// shard, MFSDP_BLOCK_SHARD; the extents divide the tensor's). The blocks,
/// numbered row-major, are dealt round-robin to `ranks` ranks (block k to
/// rank k % ranks), and each rank keeps its blocks packed one after the
/// other, each block row-major. The *packed order* of the blocks is rank
/// 0's, then rank 1's, ...: what an all-gather-v of every rank's packed
/// blocks concatenates, and what a reduce-scatter-v deals back.
struct BlockGrid {
  int64_t rows = 0, cols = 0, blockRows = 1, blockCols = 1, ranks = 1;

  MFSDP_HOST_DEVICE int64_t blockElems() const { return blockRows * blockCols; }
  MFSDP_HOST_DEVICE int64_t gridCols() const { return cols / blockCols; }
  MFSDP_HOST_DEVICE int64_t blocks() const { return rows / blockRows * gridCols(); }
  /// How many blocks rank r keeps.
  MFSDP_HOST_DEVICE int64_t blocksOf(int64_t r) const {
    return blocks() / ranks + (r < blocks() % ranks ? 1 : 0);
  }
  /// The packed position of rank r's first block.
  MFSDP_HOST_DEVICE int64_t firstBlockOf(int64_t r) const {
    const int64_t extra = blocks() % ranks;
    return r * (blocks() / ranks) + (r < extra ? r : extra);
  }
  /// The row-major index of the block at packed position t.
  MFSDP_HOST_DEVICE int64_t blockAt(int64_t t) const {
    const int64_t base = blocks() / ranks, extra = blocks() % ranks;
    // The first `extra` ranks keep base + 1 blocks, the others base.
    int64_t r, j;
    if (t < (base + 1) * extra) {
      r = t / (base + 1);
      j = t % (base + 1);
    } else {
      r = extra + (t - (base + 1) * extra) / base;
      j = (t - (base + 1) * extra) % base;
    }
    return j * ranks + r;
  }
  /// The offset in the whole (row-major) tensor of element e (row-major
  /// within the block) of block k.
  MFSDP_HOST_DEVICE int64_t wholeOffset(int64_t k, int64_t e) const {
    const int64_t row = k / gridCols() * blockRows + e / blockCols;
    const int64_t col = k % gridCols() * blockCols + e % blockCols;
    return row * cols + col;
  }
};

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

/// The fused forms: every tensor of `tensors` (n of them) stepped in one
/// call, in one pass over the list, each exactly as adamwStep / sgdStep
/// would step it alone (the same operations in the same order: the results
/// are bitwise those of one call per tensor). The tensors must not overlap.
void adamwMulti(const AdamWTensor *tensors, int64_t n);
void sgdMulti(const SGDTensor *tensors, int64_t n);

/// Muon momentum (EMA form, torch.optim.Muon): buf = mu*buf + (1-mu)*g;
/// out = nesterov ? g + mu*(buf - g) : buf.
void muonMomentum(const float *grad, float *buf, float *out, int64_t n,
                  float momentum, bool nesterov);

/// Bytes of workspace newtonSchulz needs for a rows x cols matrix.
int64_t newtonSchulzWorkspace(int64_t rows, int64_t cols);

/// X = NS(G) (NewtonSchulzHyper): normalise by the Frobenius norm (the
/// norm in double, its inverse in float), work on the wide orientation
/// (rows <= cols), repeat A = X X^T, B = b A + c A A, X = a X + B X, in
/// the precision and form `h` names (OpenBLAS ssyrk / sgemm).
/// `out` may alias `in`. `workspace` holds newtonSchulzWorkspace() bytes.
void newtonSchulz(const float *in, float *out, int64_t rows, int64_t cols,
                  const NewtonSchulzHyper &h, float *workspace);

/// The Muon parameter update from an orthogonalised update O:
/// p -= lr*wd*p; p -= lr * scale * O, scale = muonScaleFactor().
void muonApply(float *param, const float *ortho, int64_t rows, int64_t cols,
               const MuonHyper &h);

/// One whole Muon step of a matrix on its owner: momentum, Newton-Schulz,
/// update. `scratch` holds rows*cols floats plus newtonSchulzWorkspace().
void muonStep(float *param, const float *grad, float *buf, int64_t rows,
              int64_t cols, const MuonHyper &h, float *scratch);

/// The sum of x[i]^2 over n floats, accumulated in double (each square of
/// an fp32 value is exact in double): gradient clipping's norm.
double sumSquares(const float *x, int64_t n);

/// Block shards: `packed` (numBlocks blocks) = the blocks of `whole` at
/// packed positions [firstBlock, firstBlock + numBlocks) of `g`.
void packBlocks(const float *whole, float *packed, const BlockGrid &g,
                int64_t firstBlock, int64_t numBlocks);
/// The inverse: those blocks of `whole` from `packed`; the rest of `whole`
/// is left as it is.
void unpackBlocks(const float *packed, float *whole, const BlockGrid &g,
                  int64_t firstBlock, int64_t numBlocks);

/// fp32 <-> bf16, round to nearest even; NaN stays NaN.
void castF32ToBF16(const float *in, uint16_t *out, int64_t n);
void castBF16ToF32(const uint16_t *in, float *out, int64_t n);
/// A 2-D copy that rounds: row i of `height`, `width` fp32 elements at
/// src + i * srcPitch, to bf16 at dst + i * dstPitch (pitches in
/// elements). The packing of a bucket's gradients for a bf16 reduction.
void castF32ToBF16Strided(uint16_t *dst, int64_t dstPitch, const float *src,
                          int64_t srcPitch, int64_t width, int64_t height);
uint16_t toBF16(float x);
float fromBF16(uint16_t x);

/// The bf16 sum of two bf16 values (the raw bits), rounded to nearest even:
/// the reduce dtype's sum (mfsdp_reduce_dtype MFSDP_REDUCE_BF16), the same
/// as ncclBfloat16's. Commutative; a NaN operand gives a NaN, inf + -inf a
/// NaN, a sum past the largest bf16 inf. Exact rounding of the exact sum:
/// the fp32 sum of two bf16 values is exact when their exponents differ by
/// at most 15, and otherwise the smaller is below 2^-8 of the larger's bf16
/// ulp, where the fp32 sum rounds to bf16 as the exact sum does.
uint16_t addBF16(uint16_t a, uint16_t b);
/// inout[i] = addBF16(in[i], inout[i]) (an MPI_Op's and gloo's reduce
/// function shape: the operand order does not matter).
void sumBF16(const uint16_t *in, uint16_t *inout, int64_t n);

} // namespace host
} // namespace mfsdp::rt

#endif // MFSDP_RUNTIME_KERNELS_H
