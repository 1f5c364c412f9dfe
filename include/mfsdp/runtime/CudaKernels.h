//===- CudaKernels.h - CUDA twins of the runtime kernels ----------*- C++ -*-===//
//
// The same semantics as mfsdp/runtime/Kernels.h (host), on device pointers
// and a stream. Newton-Schulz runs its products in the precision its
// hyperparameters name (NsPrecision: fp32, or bf16 operands with fp32
// accumulation as torch.optim.Muon; cuBLAS GemmEx, never TF32), the
// symmetric ones over the tiles on and below the diagonal (NsForm::Syrk).
// Every call returns a status; nothing here runs on machines without a GPU.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_RUNTIME_CUDAKERNELS_H
#define MFSDP_RUNTIME_CUDAKERNELS_H

#include "mfsdp/runtime/Kernels.h"

#include <cstdint>

typedef struct CUstream_st *cudaStream_t;
typedef struct cublasContext *cublasHandle_t;

namespace mfsdp::rt::cuda {

/// 0 on success; otherwise a CUDA or cuBLAS error code, with
/// lastError() describing it.
int adamwStep(float *param, const float *grad, float *m, float *v, int64_t n,
              const AdamWHyper &h, int64_t step, cudaStream_t stream);
int sgdStep(float *param, const float *grad, float *buf, int64_t n,
            const SGDHyper &h, int64_t step, cudaStream_t stream);
/// The host and device memory of a fused optimizer call's table of
/// tensors and chunks, kept between calls and grown as needed: a pinned
/// host copy the table is written into, the device copy the kernel reads
/// (stream-ordered allocations), and an event after the last upload, which
/// the next call waits for before it writes the host copy again.
/// releaseMultiTensorTable frees them (after the stream is done).
struct MultiTensorTable {
  void *host = nullptr, *device = nullptr;
  size_t hostBytes = 0, deviceBytes = 0;
  struct CUevent_st *uploaded = nullptr;
  /// The wait for the last upload (the host copy is reused) is polled and
  /// bounded by this many ms (the collective timeout: the upload may sit
  /// behind a collective whose peer died).
  int64_t timeoutMs = 10LL * 60 * 1000;
};
void releaseMultiTensorTable(MultiTensorTable &table);
/// The fused forms (host::adamwMulti, sgdMulti): one kernel launch over
/// every tensor of the list, split into chunks of at most
/// kMultiTensorChunk elements, one thread block per chunk; each tensor
/// carries its own hyperparameters and step. The list is uploaded through
/// `table` before the call returns.
constexpr int64_t kMultiTensorChunk = 16384;
int adamwMulti(const AdamWTensor *tensors, int64_t n, MultiTensorTable &table,
               cudaStream_t stream);
int sgdMulti(const SGDTensor *tensors, int64_t n, MultiTensorTable &table,
             cudaStream_t stream);
int muonMomentum(const float *grad, float *buf, float *out, int64_t n,
                 float momentum, bool nesterov, cudaStream_t stream);
/// Bytes of device workspace newtonSchulz needs.
int64_t newtonSchulzWorkspace(int64_t rows, int64_t cols);
int newtonSchulz(cublasHandle_t blas, const float *in, float *out, int64_t rows,
                 int64_t cols, const NewtonSchulzHyper &h, void *workspace,
                 cudaStream_t stream);
int muonApply(float *param, const float *ortho, int64_t rows, int64_t cols,
              const MuonHyper &h, cudaStream_t stream);
/// *sum (device memory) += host::sumSquares(x, n), accumulated in double
/// (per block, then atomically: the order of the additions varies).
int sumSquares(const float *x, int64_t n, double *sum, cudaStream_t stream);
int castF32ToBF16(const float *in, uint16_t *out, int64_t n, cudaStream_t stream);
int castBF16ToF32(const uint16_t *in, float *out, int64_t n, cudaStream_t stream);
/// host::castF32ToBF16Strided.
int castF32ToBF16Strided(uint16_t *dst, int64_t dstPitch, const float *src,
                         int64_t srcPitch, int64_t width, int64_t height,
                         cudaStream_t stream);
/// buf = fromBF16(toBF16(buf)), in place (the host backend's rounding of
/// bf16 compute copies and gradients).
int roundToBF16(float *buf, int64_t n, cudaStream_t stream);
/// buf *= factor.
int scale(float *buf, int64_t n, float factor, cudaStream_t stream);
/// Block shards: host::packBlocks / host::unpackBlocks.
int packBlocks(const float *whole, float *packed, const BlockGrid &grid,
               int64_t firstBlock, int64_t numBlocks, cudaStream_t stream);
int unpackBlocks(const float *packed, float *whole, const BlockGrid &grid,
                 int64_t firstBlock, int64_t numBlocks, cudaStream_t stream);
const char *lastError();

} // namespace mfsdp::rt::cuda

#endif // MFSDP_RUNTIME_CUDAKERNELS_H
