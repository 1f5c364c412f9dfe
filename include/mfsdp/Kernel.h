//===- Kernel.h - One kernel of a unit's compute, for the cost model -*- C++ -*-===//
//
// What a unit's forward runs, kernel by kernel, per token: the GEMMs by
// shape, attention by heads, head dims and sequence length, and the
// memory-bound work (norms, activations, rotary, residuals, the loss) by
// the bytes it moves. The graph carries these per unit (graph::UnitCost
// and #plan.cost's `kernels`), the step builder copies them onto the
// unit's compute ops, and the cost model (mfsdp/cost/KernelModel.h) prices
// each on a hardware profile: forward as listed, backward derived (two
// GEMMs per GEMM, attention's backward rate, memory work twice).
//
// One encoding, shared by the graph format, the plan dialect's
// #plan.kernel and the step: a kind, a list of integers and one number.
//   gemm:      shape [n, k, count], scale = rows per token. Each of `count`
//              products is (scale * tokens) x k times k x n, in bf16.
//   attention: shape [heads, head_dim, head_dim_v, causal (0 or 1), seq],
//              scale = 1: tokens / seq sequences of `seq` tokens.
//   memory:    shape [], [fixed bytes] or [fixed bytes, launches], scale =
//              bytes per token: bytes moved through device memory, forward,
//              by `launches` kernels (1 when not given).
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_KERNEL_H
#define MFSDP_KERNEL_H

#include "mfsdp/Vocabulary.h"

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mfsdp {

// KernelKind and its spellings ("gemm", "attention", "memory") are the
// shared vocabulary's (mfsdp/Vocabulary.h): enumName(k), parseEnum<KernelKind>.

struct UnitKernel {
  KernelKind kind = KernelKind::Gemm;
  std::vector<int64_t> shape;
  double scale = 0;

  static UnitKernel gemm(int64_t n, int64_t k, double rowsPerToken = 1, int64_t count = 1) {
    return {KernelKind::Gemm, {n, k, count}, rowsPerToken};
  }
  static UnitKernel attention(int64_t heads, int64_t headDim, int64_t headDimV, bool causal,
                              int64_t seq) {
    return {KernelKind::Attention, {heads, headDim, headDimV, causal ? 1 : 0, seq}, 1.0};
  }
  static UnitKernel memory(double bytesPerToken, int64_t fixedBytes = 0, int64_t launches = 1) {
    UnitKernel k{KernelKind::Memory, {}, bytesPerToken};
    if (fixedBytes > 0 || launches != 1)
      k.shape.push_back(fixedBytes);
    if (launches != 1)
      k.shape.push_back(launches);
    return k;
  }
  bool operator==(const UnitKernel &o) const {
    return kind == o.kind && shape == o.shape && scale == o.scale;
  }
};

/// Null if `k` is well formed (the shape's length and values for its kind,
/// a finite non-negative scale); otherwise what is wrong. Allocates
/// nothing: the cost model checks every kernel it prices.
inline const char *kernelProblem(const UnitKernel &k) {
  auto positive = [&](size_t from, size_t to) {
    for (size_t i = from; i < to; ++i)
      if (k.shape[i] <= 0)
        return false;
    return true;
  };
  if (!(k.scale >= 0 && k.scale < 1e300))
    return "its scale must be finite and non-negative";
  switch (k.kind) {
  case KernelKind::Gemm:
    if (k.shape.size() != 3 || !positive(0, 3))
      return "a gemm kernel's shape is [n, k, count], each positive";
    return nullptr;
  case KernelKind::Attention:
    if (k.shape.size() != 5 || !positive(0, 3) || (k.shape[3] != 0 && k.shape[3] != 1) ||
        k.shape[4] <= 0)
      return "an attention kernel's shape is [heads, head_dim, head_dim_v, causal (0 or 1), "
             "seq], the others positive";
    return nullptr;
  case KernelKind::Memory:
    if (k.shape.size() > 2 || (k.shape.size() >= 1 && k.shape[0] < 0) ||
        (k.shape.size() == 2 && k.shape[1] < 1))
      return "a memory kernel's shape is [], [fixed bytes >= 0] or [fixed bytes >= 0, "
             "launches >= 1]";
    return nullptr;
  }
  return "unknown kernel kind";
}

/// Empty if `k` is well formed; otherwise what is wrong (kernelProblem).
inline std::string validateKernel(const UnitKernel &k) {
  const char *problem = kernelProblem(k);
  return problem ? problem : "";
}

/// A unit's kernels as each of its compute ops holds them: one list shared
/// by every op that computes the unit (a copy shares it), since a step has
/// a forward, a backward and perhaps a recomputation per unit and
/// microbatch, and a large step millions of ops. Read-only once made.
class KernelList {
public:
  KernelList() = default;
  KernelList(std::vector<UnitKernel> kernels)
      : list(kernels.empty() ? nullptr
                             : std::make_shared<const std::vector<UnitKernel>>(
                                   std::move(kernels))) {}
  KernelList(std::initializer_list<UnitKernel> kernels)
      : KernelList(std::vector<UnitKernel>(kernels)) {}

  const std::vector<UnitKernel> &get() const { return list ? *list : none(); }
  operator const std::vector<UnitKernel> &() const { return get(); }
  bool empty() const { return !list; }
  size_t size() const { return get().size(); }
  const UnitKernel &operator[](size_t i) const { return get()[i]; }
  std::vector<UnitKernel>::const_iterator begin() const { return get().begin(); }
  std::vector<UnitKernel>::const_iterator end() const { return get().end(); }

private:
  static const std::vector<UnitKernel> &none() {
    static const std::vector<UnitKernel> empty;
    return empty;
  }
  std::shared_ptr<const std::vector<UnitKernel>> list;
};

} // namespace mfsdp

#endif // MFSDP_KERNEL_H
