//===- Kernels.cu - CUDA twins of the runtime kernels ---------------------===//
#include "mfsdp/runtime/CudaKernels.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

namespace mfsdp::rt::cuda {

namespace {

thread_local char lastMessage[256] = "";

int fail(const char *what, int code, const char *detail) {
  std::snprintf(lastMessage, sizeof(lastMessage), "%s failed (%d): %s", what,
                code, detail ? detail : "");
  return code ? code : -1;
}

int check(cudaError_t e, const char *what) {
  return e == cudaSuccess ? 0 : fail(what, static_cast<int>(e), cudaGetErrorString(e));
}

int check(cublasStatus_t s, const char *what) {
  return s == CUBLAS_STATUS_SUCCESS ? 0
                                    : fail(what, static_cast<int>(s), "cuBLAS status");
}

unsigned blocks(int64_t n, unsigned threads = 256) {
  return static_cast<unsigned>(std::min<int64_t>((n + threads - 1) / threads, 65535));
}

/// One AdamW element, as host::adamwStep: adamwKernel's and
/// adamwMultiKernel's (the same code, so the two agree bitwise).
__device__ __forceinline__ void adamwElement(float &p, float g, float &m, float &v,
                                             float beta1, float beta2, float lr,
                                             float eps, float weightDecay, float c1,
                                             float c2) {
  const float decay = 1.f - lr * weightDecay;
  float mi = beta1 * m + (1.f - beta1) * g;
  float vi = beta2 * v + (1.f - beta2) * g * g;
  m = mi;
  v = vi;
  p = p * decay - lr * (mi / c1) / (sqrtf(vi / c2) + eps);
}

/// One SGD element, as host::sgdStep (`buf` read and written only with
/// momentum).
__device__ __forceinline__ void sgdElement(float &p, float g, float *buf, float lr,
                                           float momentum, float weightDecay,
                                           bool nesterov, bool first) {
  float d = g + weightDecay * p;
  if (momentum != 0.f) {
    float b = first ? d : momentum * *buf + d;
    *buf = b;
    d = nesterov ? d + momentum * b : b;
  }
  p -= lr * d;
}

__global__ void adamwKernel(float *p, const float *g, float *m, float *v,
                            int64_t n, AdamWHyper h, float c1, float c2) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float pi = p[i], mi = m[i], vi = v[i];
    adamwElement(pi, g[i], mi, vi, h.beta1, h.beta2, h.lr, h.eps, h.weightDecay, c1, c2);
    m[i] = mi;
    v[i] = vi;
    p[i] = pi;
  }
}

__global__ void sgdKernel(float *p, const float *g, float *buf, int64_t n,
                          SGDHyper h, bool first) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float pi = p[i];
    sgdElement(pi, g[i], buf + i, h.lr, h.momentum, h.weightDecay, h.nesterov, first);
    p[i] = pi;
  }
}

// The fused kernels' table (multi_tensor_apply's): one slot per tensor
// (its pointers and hyperparameters, the bias corrections computed on the
// host as adamwStep does) and one chunk per thread block, naming its slot
// and its range of elements.
struct AdamWSlot {
  float *p;
  const float *g;
  float *m, *v;
  float lr, beta1, beta2, eps, weightDecay, c1, c2;
};
struct SGDSlot {
  float *p;
  const float *g;
  float *buf;
  float lr, momentum, weightDecay;
  int nesterov, first;
};
struct Chunk {
  int64_t slot, begin, end;
};

__global__ void adamwMultiKernel(const AdamWSlot *slots, const Chunk *chunks) {
  const Chunk c = chunks[blockIdx.x];
  const AdamWSlot s = slots[c.slot];
  for (int64_t i = c.begin + threadIdx.x; i < c.end; i += blockDim.x) {
    float pi = s.p[i], mi = s.m[i], vi = s.v[i];
    adamwElement(pi, s.g[i], mi, vi, s.beta1, s.beta2, s.lr, s.eps, s.weightDecay,
                 s.c1, s.c2);
    s.m[i] = mi;
    s.v[i] = vi;
    s.p[i] = pi;
  }
}

__global__ void sgdMultiKernel(const SGDSlot *slots, const Chunk *chunks) {
  const Chunk c = chunks[blockIdx.x];
  const SGDSlot s = slots[c.slot];
  for (int64_t i = c.begin + threadIdx.x; i < c.end; i += blockDim.x) {
    float pi = s.p[i];
    sgdElement(pi, s.g[i], s.buf + i, s.lr, s.momentum, s.weightDecay, s.nesterov != 0,
               s.first != 0);
    s.p[i] = pi;
  }
}

/// The chunks of the tensors whose counts are `counts` (slot k for the
/// k-th tensor of nonzero count), at most kMultiTensorChunk elements each.
std::vector<Chunk> chunksOf(const std::vector<int64_t> &counts) {
  std::vector<Chunk> chunks;
  for (size_t k = 0; k < counts.size(); ++k)
    for (int64_t b = 0; b < counts[k]; b += kMultiTensorChunk)
      chunks.push_back({static_cast<int64_t>(k), b,
                        std::min(b + kMultiTensorChunk, counts[k])});
  return chunks;
}

/// Waits until the last upload through `table` is done, polling within
/// its timeout (never cudaEventSynchronize, which a collective that
/// never completes would hold forever).
int waitUploaded(MultiTensorTable &table) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(table.timeoutMs);
  for (int tries = 0;; ++tries) {
    const cudaError_t q = cudaEventQuery(table.uploaded);
    if (q != cudaErrorNotReady)
      return check(q, "cudaEventQuery (the last table upload)");
    if (tries > 1000) {
      if (Clock::now() >= deadline)
        break;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  std::snprintf(lastMessage, sizeof(lastMessage),
                "the last optimizer table upload did not complete within %lld ms (the "
                "collective timeout: the compute stream waits for a collective that did "
                "not complete)",
                static_cast<long long>(table.timeoutMs));
  return static_cast<int>(cudaErrorTimeout);
}

/// Uploads `slots` and `chunks` through `table` (host copy, then device
/// copy on `stream`), and sets where the kernel finds them.
template <typename Slot>
int upload(const std::vector<Slot> &slots, const std::vector<Chunk> &chunks,
           MultiTensorTable &table, cudaStream_t stream, const Slot *&deviceSlots,
           const Chunk *&deviceChunks) {
  const size_t chunkOffset = (slots.size() * sizeof(Slot) + 15) / 16 * 16;
  const size_t bytes = chunkOffset + chunks.size() * sizeof(Chunk);
  if (!table.uploaded) {
    if (int e = check(cudaEventCreateWithFlags(&table.uploaded, cudaEventDisableTiming),
                      "cudaEventCreate"))
      return e;
  } else if (int e = waitUploaded(table)) {
    return e; // the host copy is still being read
  }
  if (table.hostBytes < bytes) {
    if (table.host)
      cudaFreeHost(table.host);
    table.host = nullptr;
    table.hostBytes = 0;
    const size_t want = std::max(bytes, size_t(64) << 10);
    if (int e = check(cudaMallocHost(&table.host, want), "cudaMallocHost (table)"))
      return e;
    table.hostBytes = want;
  }
  if (table.deviceBytes < bytes) {
    if (table.device) // after the kernels issued before that read it
      if (int e = check(cudaFreeAsync(table.device, stream), "cudaFreeAsync (table)"))
        return e;
    table.device = nullptr;
    table.deviceBytes = 0;
    const size_t want = std::max(bytes, table.hostBytes);
    if (int e = check(cudaMallocAsync(&table.device, want, stream),
                      "cudaMallocAsync (table)"))
      return e;
    table.deviceBytes = want;
  }
  char *host = static_cast<char *>(table.host);
  std::memcpy(host, slots.data(), slots.size() * sizeof(Slot));
  std::memcpy(host + chunkOffset, chunks.data(), chunks.size() * sizeof(Chunk));
  if (int e = check(cudaMemcpyAsync(table.device, table.host, bytes,
                                    cudaMemcpyHostToDevice, stream),
                    "cudaMemcpyAsync (table)"))
    return e;
  if (int e = check(cudaEventRecord(table.uploaded, stream), "cudaEventRecord"))
    return e;
  deviceSlots = static_cast<const Slot *>(table.device);
  deviceChunks = reinterpret_cast<const Chunk *>(static_cast<const char *>(table.device) +
                                                 chunkOffset);
  return 0;
}

__global__ void momentumKernel(const float *g, float *buf, float *out, int64_t n,
                               float mu, bool nesterov) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float b = mu * buf[i] + (1.f - mu) * g[i];
    buf[i] = b;
    out[i] = nesterov ? g[i] + mu * (b - g[i]) : b;
  }
}

/// *sum += the sum of x[i]^2, accumulated in Acc: float for Newton-Schulz's
/// norm, double for gradient clipping's.
template <typename Acc>
__global__ void sumSquaresKernel(const float *x, int64_t n, Acc *sum) {
  __shared__ Acc part[256];
  Acc acc = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const Acc v = x[i];
    acc += v * v;
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s)
      part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    atomicAdd(sum, part[0]);
}

/// Newton-Schulz's element type: float (NsPrecision::FP32) or bf16.
template <typename T> __device__ T fromFloat(float x);
template <> __device__ float fromFloat<float>(float x) { return x; }
template <> __device__ __nv_bfloat16 fromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
__device__ float toFloat(float x) { return x; }
__device__ float toFloat(__nv_bfloat16 x) { return __bfloat162float(x); }

/// The side of the square tiles the transposing kernels move through
/// shared memory (so that both the reads and the writes of a warp touch
/// consecutive addresses), and the rows of a tile each thread block walks.
constexpr int kTile = 32, kTileRows = 8;

/// X (s x l, row-major) = in / (||in|| + eps), or in / max(||in||, eps)
/// with `clamp`; a wide or square input keeps its layout.
template <typename T>
__global__ void normalizeKernel(const float *in, T *X, int64_t n, const float *sum,
                                float eps, bool clamp) {
  const float norm = sqrtf(*sum);
  const float inv = 1.f / (clamp ? fmaxf(norm, eps) : norm + eps);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    X[i] = fromFloat<T>(in[i] * inv);
}

/// As normalizeKernel for a tall input (rows > cols): X = the scaled
/// input transposed (cols x rows), one kTile x kTile tile per thread block
/// (blockDim kTile x kTileRows), through shared memory.
template <typename T>
__global__ void normalizeTransposedKernel(const float *in, T *X, int64_t rows,
                                          int64_t cols, const float *sum, float eps,
                                          bool clamp) {
  __shared__ float tile[kTile][kTile + 1];
  const float norm = sqrtf(*sum);
  const float inv = 1.f / (clamp ? fmaxf(norm, eps) : norm + eps);
  const int64_t r0 = int64_t(blockIdx.x) * kTile, c0 = int64_t(blockIdx.y) * kTile;
  for (int j = threadIdx.y; j < kTile; j += kTileRows) {
    const int64_t r = r0 + j, c = c0 + threadIdx.x;
    if (r < rows && c < cols)
      tile[j][threadIdx.x] = in[r * cols + c];
  }
  __syncthreads();
  for (int j = threadIdx.y; j < kTile; j += kTileRows) {
    const int64_t c = c0 + j, r = r0 + threadIdx.x; // X[c][r]
    if (r < rows && c < cols)
      X[c * rows + r] = fromFloat<T>(tile[threadIdx.x][j] * inv);
  }
}

template <typename T>
__global__ void storeKernel(const T *X, float *out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = toFloat(X[i]);
}

/// out (rows x cols, tall) = X (cols x rows) transposed, tile by tile.
template <typename T>
__global__ void storeTransposedKernel(const T *X, float *out, int64_t rows,
                                      int64_t cols) {
  __shared__ float tile[kTile][kTile + 1];
  const int64_t r0 = int64_t(blockIdx.x) * kTile, c0 = int64_t(blockIdx.y) * kTile;
  for (int j = threadIdx.y; j < kTile; j += kTileRows) {
    const int64_t c = c0 + j, r = r0 + threadIdx.x; // X[c][r]
    if (r < rows && c < cols)
      tile[j][threadIdx.x] = toFloat(X[c * rows + r]);
  }
  __syncthreads();
  for (int j = threadIdx.y; j < kTile; j += kTileRows) {
    const int64_t r = r0 + j, c = c0 + threadIdx.x;
    if (r < rows && c < cols)
      out[r * cols + c] = tile[threadIdx.x][j];
  }
}

/// The grid of kTile x kTile tiles over a rows x cols matrix: the row tiles
/// on x (up to 2^31 - 1 of them; the transposing kernels see tall matrices,
/// whose rows are the long side), the column tiles on y (at most 65,535:
/// 2,097,120 columns).
dim3 tileGrid(int64_t rows, int64_t cols) {
  return dim3(static_cast<unsigned>((rows + kTile - 1) / kTile),
              static_cast<unsigned>((cols + kTile - 1) / kTile));
}

/// C (n x n, row-major) whose lower triangle holds a symmetric matrix: the
/// upper triangle gets its mirror. One thread block per tile on or above
/// the diagonal (blockIdx.y = tile column >= blockIdx.x = tile row; blocks
/// below return at once): it reads the mirrored tile below the diagonal
/// row by row and writes its own row by row, through shared memory.
template <typename T> __global__ void mirrorLowerKernel(T *C, int64_t n) {
  if (blockIdx.y < blockIdx.x)
    return;
  __shared__ T tile[kTile][kTile + 1];
  const int64_t r0 = int64_t(blockIdx.x) * kTile, c0 = int64_t(blockIdx.y) * kTile;
  // The source tile: rows c0.., columns r0.. (below the diagonal).
  for (int j = threadIdx.y; j < kTile; j += kTileRows) {
    const int64_t r = c0 + j, c = r0 + threadIdx.x;
    if (r < n && c < n)
      tile[j][threadIdx.x] = C[r * n + c];
  }
  __syncthreads();
  for (int j = threadIdx.y; j < kTile; j += kTileRows) {
    const int64_t r = r0 + j, c = c0 + threadIdx.x; // C[r][c] = C[c][r]
    if (r < n && c < n && c > r)
      C[r * n + c] = tile[threadIdx.x][j];
  }
}

__global__ void applyKernel(float *p, const float *o, int64_t n, float lr,
                            float scale, float decay) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    p[i] = p[i] * decay - lr * scale * o[i];
}

__global__ void toBF16Kernel(const float *in, __nv_bfloat16 *out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(in[i]);
}

__global__ void fromBF16Kernel(const __nv_bfloat16 *in, float *out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __bfloat162float(in[i]);
}

__global__ void roundBF16Kernel(float *buf, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    buf[i] = __bfloat162float(__float2bfloat16_rn(buf[i]));
}

__global__ void scaleKernel(float *buf, int64_t n, float factor) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    buf[i] *= factor;
}

/// Element i of the packed blocks from (toPacked) or to its place in the
/// whole tensor.
__global__ void moveBlocksKernel(const float *src, float *dst, BlockGrid g,
                                 int64_t firstBlock, int64_t n, bool toPacked) {
  const int64_t elems = g.blockElems();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t w = g.wholeOffset(g.blockAt(firstBlock + i / elems), i % elems);
    if (toPacked)
      dst[i] = src[w];
    else
      dst[w] = src[i];
  }
}

int moveBlocks(const float *src, float *dst, const BlockGrid &g,
               int64_t firstBlock, int64_t numBlocks, bool toPacked,
               cudaStream_t stream) {
  const int64_t n = numBlocks * g.blockElems();
  if (n <= 0)
    return 0;
  moveBlocksKernel<<<blocks(n), 256, 0, stream>>>(src, dst, g, firstBlock, n, toPacked);
  return check(cudaGetLastError(), "moveBlocksKernel");
}

template <typename T> constexpr cudaDataType_t dataType();
template <> constexpr cudaDataType_t dataType<float>() { return CUDA_R_32F; }
template <> constexpr cudaDataType_t dataType<__nv_bfloat16>() { return CUDA_R_16BF; }

/// Row-major C (m x n) = alpha A (m x k) op B + beta C on T data (fp32 or
/// bf16) with fp32 accumulation (CUBLAS_COMPUTE_32F: no TF32), C rounded
/// once to T; cuBLAS is column-major, so compute C^T = B^T A^T.
template <typename T>
int gemm(cublasHandle_t blas, bool transB, int m, int n, int k, float alpha,
         const T *A, int lda, const T *B, int ldb, float beta, T *C, int ldc) {
  return check(cublasGemmEx(blas, transB ? CUBLAS_OP_T : CUBLAS_OP_N,
                            CUBLAS_OP_N, n, m, k, &alpha, B, dataType<T>(), ldb,
                            A, dataType<T>(), lda, &beta, C, dataType<T>(), ldc,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
}

/// Row-major C (n x n) = alpha A A^T + beta C (A n x k), symmetric: one
/// GEMM per strip of `strip` rows of C, rows [i0, i1) against columns
/// [0, i1), so only the tiles on and below the diagonal are computed
/// (n^2 k (1 + strip / n) FLOPs instead of 2 n^2 k; cuBLAS has no bf16
/// syrk), then the upper triangle mirrored from the lower.
template <typename T>
int syrkLower(cublasHandle_t blas, int n, int k, float alpha, const T *A,
              int lda, float beta, T *C, int ldc, int strip, cudaStream_t stream) {
  for (int i0 = 0; i0 < n; i0 += strip) {
    const int i1 = std::min(n, i0 + strip);
    if (int e = gemm<T>(blas, true, i1 - i0, i1, k, alpha, A + int64_t(i0) * lda,
                        lda, A, lda, beta, C + int64_t(i0) * ldc, ldc))
      return e;
  }
  mirrorLowerKernel<<<tileGrid(n, n), dim3(kTile, kTileRows), 0, stream>>>(C, n);
  return check(cudaGetLastError(), "mirrorLowerKernel");
}

/// Newton-Schulz's iterations on X (s x l) in T: A, B and the new X in
/// the workspace after it.
template <typename T>
int newtonSchulzIn(cublasHandle_t blas, const float *in, float *out,
                   int64_t rows, int64_t cols, const NewtonSchulzHyper &h,
                   float *sum, void *matrices, cudaStream_t stream) {
  const bool transposed = rows > cols;
  const int64_t s = std::min(rows, cols), l = std::max(rows, cols);
  T *X = static_cast<T *>(matrices);
  T *A = X + s * l, *B = A + s * s, *Y = B + s * s;
  if (transposed)
    normalizeTransposedKernel<T><<<tileGrid(rows, cols), dim3(kTile, kTileRows), 0,
                                   stream>>>(in, X, rows, cols, sum, h.eps,
                                             h.norm == NsNorm::Clamp);
  else
    normalizeKernel<T><<<blocks(rows * cols), 256, 0, stream>>>(
        in, X, rows * cols, sum, h.eps, h.norm == NsNorm::Clamp);
  if (int e = check(cudaGetLastError(), "normalizeKernel"))
    return e;
  const bool syrk = h.form == NsForm::Syrk;
  // At least one row, at most the side (so the int below never truncates).
  const int strip = static_cast<int>(std::clamp<int64_t>(
      h.syrkStrip > 0 ? h.syrkStrip : syrkStripRows(s, h.precision), 1, s));
  const int S = static_cast<int>(s), L = static_cast<int>(l);
  for (int64_t k = 0; k < h.steps; ++k) {
    // A = X X^T
    if (int e = syrk ? syrkLower<T>(blas, S, L, 1.f, X, L, 0.f, A, S, strip, stream)
                     : gemm<T>(blas, true, S, S, L, 1.f, X, L, X, L, 0.f, A, S))
      return e;
    // B = b A + c A A (A symmetric: A A = A A^T)
    if (int e = check(cudaMemcpyAsync(B, A, sizeof(T) * s * s,
                                      cudaMemcpyDeviceToDevice, stream),
                      "cudaMemcpyAsync"))
      return e;
    if (int e = syrk ? syrkLower<T>(blas, S, S, h.c, A, S, h.b, B, S, strip, stream)
                     : gemm<T>(blas, false, S, S, S, h.c, A, S, A, S, h.b, B, S))
      return e;
    // X = a X + B X
    if (int e = check(cudaMemcpyAsync(Y, X, sizeof(T) * s * l,
                                      cudaMemcpyDeviceToDevice, stream),
                      "cudaMemcpyAsync"))
      return e;
    if (int e = gemm<T>(blas, false, S, L, S, 1.f, B, S, X, L, h.a, Y, L))
      return e;
    std::swap(X, Y);
  }
  if (transposed)
    storeTransposedKernel<T><<<tileGrid(rows, cols), dim3(kTile, kTileRows), 0, stream>>>(
        X, out, rows, cols);
  else
    storeKernel<T><<<blocks(rows * cols), 256, 0, stream>>>(X, out, rows * cols);
  return check(cudaGetLastError(), "storeKernel");
}

} // namespace

const char *lastError() { return lastMessage; }

int adamwStep(float *p, const float *g, float *m, float *v, int64_t n,
              const AdamWHyper &h, int64_t step, cudaStream_t stream) {
  float c1 = 1.f - std::pow(h.beta1, static_cast<float>(step));
  float c2 = 1.f - std::pow(h.beta2, static_cast<float>(step));
  adamwKernel<<<blocks(n), 256, 0, stream>>>(p, g, m, v, n, h, c1, c2);
  return check(cudaGetLastError(), "adamwKernel");
}

int sgdStep(float *p, const float *g, float *buf, int64_t n, const SGDHyper &h,
            int64_t step, cudaStream_t stream) {
  sgdKernel<<<blocks(n), 256, 0, stream>>>(p, g, buf, n, h, step <= 1);
  return check(cudaGetLastError(), "sgdKernel");
}

void releaseMultiTensorTable(MultiTensorTable &table) {
  if (table.device)
    cudaFree(table.device);
  if (table.host)
    cudaFreeHost(table.host);
  if (table.uploaded)
    cudaEventDestroy(table.uploaded);
  table = MultiTensorTable{};
}

int adamwMulti(const AdamWTensor *tensors, int64_t n, MultiTensorTable &table,
               cudaStream_t stream) {
  std::vector<AdamWSlot> slots;
  std::vector<int64_t> counts;
  for (int64_t k = 0; k < n; ++k) {
    const AdamWTensor &t = tensors[k];
    if (t.count <= 0)
      continue;
    const float c1 = 1.f - std::pow(t.h.beta1, static_cast<float>(t.step));
    const float c2 = 1.f - std::pow(t.h.beta2, static_cast<float>(t.step));
    slots.push_back({t.param, t.grad, t.m, t.v, t.h.lr, t.h.beta1, t.h.beta2, t.h.eps,
                     t.h.weightDecay, c1, c2});
    counts.push_back(t.count);
  }
  const std::vector<Chunk> chunks = chunksOf(counts);
  if (chunks.empty())
    return 0;
  if (chunks.size() > 0x7fffffffu)
    return fail("adamwMultiKernel", -1, "more than 2^31 - 1 chunks");
  const AdamWSlot *deviceSlots = nullptr;
  const Chunk *deviceChunks = nullptr;
  if (int e = upload(slots, chunks, table, stream, deviceSlots, deviceChunks))
    return e;
  adamwMultiKernel<<<static_cast<unsigned>(chunks.size()), 256, 0, stream>>>(
      deviceSlots, deviceChunks);
  return check(cudaGetLastError(), "adamwMultiKernel");
}

int sgdMulti(const SGDTensor *tensors, int64_t n, MultiTensorTable &table,
             cudaStream_t stream) {
  std::vector<SGDSlot> slots;
  std::vector<int64_t> counts;
  for (int64_t k = 0; k < n; ++k) {
    const SGDTensor &t = tensors[k];
    if (t.count <= 0)
      continue;
    slots.push_back({t.param, t.grad, t.buf, t.h.lr, t.h.momentum, t.h.weightDecay,
                     t.h.nesterov ? 1 : 0, t.step <= 1 ? 1 : 0});
    counts.push_back(t.count);
  }
  const std::vector<Chunk> chunks = chunksOf(counts);
  if (chunks.empty())
    return 0;
  if (chunks.size() > 0x7fffffffu)
    return fail("sgdMultiKernel", -1, "more than 2^31 - 1 chunks");
  const SGDSlot *deviceSlots = nullptr;
  const Chunk *deviceChunks = nullptr;
  if (int e = upload(slots, chunks, table, stream, deviceSlots, deviceChunks))
    return e;
  sgdMultiKernel<<<static_cast<unsigned>(chunks.size()), 256, 0, stream>>>(deviceSlots,
                                                                         deviceChunks);
  return check(cudaGetLastError(), "sgdMultiKernel");
}

int muonMomentum(const float *g, float *buf, float *out, int64_t n, float mu,
                 bool nesterov, cudaStream_t stream) {
  momentumKernel<<<blocks(n), 256, 0, stream>>>(g, buf, out, n, mu, nesterov);
  return check(cudaGetLastError(), "momentumKernel");
}

int64_t newtonSchulzWorkspace(int64_t rows, int64_t cols) {
  int64_t s = std::min(rows, cols), l = std::max(rows, cols);
  // The norm, then X and the new X (s x l), A and B (s x s), in fp32 (the
  // larger of the two precisions).
  return 256 + static_cast<int64_t>(sizeof(float)) * (2 * s * l + 2 * s * s);
}

int newtonSchulz(cublasHandle_t blas, const float *in, float *out, int64_t rows,
                 int64_t cols, const NewtonSchulzHyper &h, void *workspace,
                 cudaStream_t stream) {
  float *sum = static_cast<float *>(workspace);
  void *matrices = static_cast<char *>(workspace) + 256;
  if (int e = check(cublasSetStream(blas, stream), "cublasSetStream"))
    return e;
  if (int e = check(cudaMemsetAsync(sum, 0, sizeof(float), stream), "cudaMemsetAsync"))
    return e;
  sumSquaresKernel<<<blocks(rows * cols), 256, 0, stream>>>(in, rows * cols, sum);
  if (h.precision == NsPrecision::BF16)
    return newtonSchulzIn<__nv_bfloat16>(blas, in, out, rows, cols, h, sum,
                                         matrices, stream);
  return newtonSchulzIn<float>(blas, in, out, rows, cols, h, sum, matrices, stream);
}

int sumSquares(const float *x, int64_t n, double *sum, cudaStream_t stream) {
  if (n <= 0)
    return 0;
  sumSquaresKernel<<<blocks(n), 256, 0, stream>>>(x, n, sum);
  return check(cudaGetLastError(), "sumSquaresKernel");
}

int muonApply(float *p, const float *o, int64_t rows, int64_t cols,
              const MuonHyper &h, cudaStream_t stream) {
  applyKernel<<<blocks(rows * cols), 256, 0, stream>>>(
      p, o, rows * cols, h.lr, muonScaleFactor(rows, cols, h.scale),
      1.f - h.lr * h.weightDecay);
  return check(cudaGetLastError(), "applyKernel");
}

int castF32ToBF16(const float *in, uint16_t *out, int64_t n, cudaStream_t stream) {
  if (n <= 0)
    return 0;
  toBF16Kernel<<<blocks(n), 256, 0, stream>>>(in, reinterpret_cast<__nv_bfloat16 *>(out), n);
  return check(cudaGetLastError(), "toBF16Kernel");
}

__global__ void toBF16StridedKernel(__nv_bfloat16 *dst, int64_t dstPitch, const float *src,
                                    int64_t srcPitch, int64_t width, int64_t height) {
  const int64_t n = width * height;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n;
       k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = k / width, j = k - i * width;
    dst[i * dstPitch + j] = __float2bfloat16_rn(src[i * srcPitch + j]);
  }
}

int castF32ToBF16Strided(uint16_t *dst, int64_t dstPitch, const float *src,
                         int64_t srcPitch, int64_t width, int64_t height,
                         cudaStream_t stream) {
  if (width <= 0 || height <= 0)
    return 0;
  toBF16StridedKernel<<<blocks(width * height), 256, 0, stream>>>(
      reinterpret_cast<__nv_bfloat16 *>(dst), dstPitch, src, srcPitch, width, height);
  return check(cudaGetLastError(), "toBF16StridedKernel");
}

int castBF16ToF32(const uint16_t *in, float *out, int64_t n, cudaStream_t stream) {
  if (n <= 0)
    return 0;
  fromBF16Kernel<<<blocks(n), 256, 0, stream>>>(
      reinterpret_cast<const __nv_bfloat16 *>(in), out, n);
  return check(cudaGetLastError(), "fromBF16Kernel");
}

int roundToBF16(float *buf, int64_t n, cudaStream_t stream) {
  if (n <= 0)
    return 0;
  roundBF16Kernel<<<blocks(n), 256, 0, stream>>>(buf, n);
  return check(cudaGetLastError(), "roundBF16Kernel");
}

int scale(float *buf, int64_t n, float factor, cudaStream_t stream) {
  if (n <= 0)
    return 0;
  scaleKernel<<<blocks(n), 256, 0, stream>>>(buf, n, factor);
  return check(cudaGetLastError(), "scaleKernel");
}

int packBlocks(const float *whole, float *packed, const BlockGrid &grid,
               int64_t firstBlock, int64_t numBlocks, cudaStream_t stream) {
  return moveBlocks(whole, packed, grid, firstBlock, numBlocks, true, stream);
}

int unpackBlocks(const float *packed, float *whole, const BlockGrid &grid,
                 int64_t firstBlock, int64_t numBlocks, cudaStream_t stream) {
  return moveBlocks(packed, whole, grid, firstBlock, numBlocks, false, stream);
}

} // namespace mfsdp::rt::cuda
