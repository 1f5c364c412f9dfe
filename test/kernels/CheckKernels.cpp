//===- CheckKernels.cpp - A step library's generated kernels, checked -----===//
//
//   mfsdp-check-kernels libstep.so
//
// Opens a generated step library and checks every host kernel it carries
// (mfsdp_plan::host_kernels: each row-shard bucket's pack and unpack,
// specialised by the compiler with the bucket's constants) against the
// definition in mfsdp/runtime.h, computed here from the plan's tables
// alone: the members' sizes (BufferSizes.h) and their master offsets in
// the memory plan. unpack must copy every rank's rows of each member out
// of the staging chunks and write nothing else; pack must fill every float
// of the staging buffer, members' rows by rank and zeros in the gaps.
// Prints one line per bucket and "N kernels checked, N failed"; exits 1 on
// any failure. The CUDA kernels (cuda_kernels, built with --cuda) have the
// same semantics; their presence is reported, they are never run here.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/runtime.h"
#include "mfsdp/runtime/BufferSizes.h"

#include <dlfcn.h>

#include <cmath>
#include <cstdio>
#include <vector>

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: mfsdp-check-kernels libstep.so\n");
    return 2;
  }
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::fprintf(stderr, "mfsdp-check-kernels: error: %s\n", dlerror());
    return 2;
  }
  auto planFn = reinterpret_cast<mfsdp_step_plan_fn>(dlsym(lib, MFSDP_STEP_PLAN_SYMBOL));
  if (!planFn) {
    std::fprintf(stderr, "mfsdp-check-kernels: error: %s has no %s\n", argv[1],
                 MFSDP_STEP_PLAN_SYMBOL);
    return 2;
  }
  const mfsdp_plan &plan = *planFn();
  if (plan.num_buckets > 0 && (!plan.buckets || !plan.memory)) {
    std::fprintf(stderr, "mfsdp-check-kernels: error: buckets without tables\n");
    return 2;
  }
  int checked = 0, failed = 0;
  const int64_t S = plan.dp_shard;
  for (int32_t b = 0; b < plan.num_buckets; ++b) {
    const mfsdp_bucket &k = plan.buckets[b];
    const bool cuda = plan.cuda_kernels && plan.cuda_kernels[b].unpack &&
                      plan.cuda_kernels[b].pack;
    if (!plan.host_kernels || !plan.host_kernels[b].unpack) {
      std::printf("bucket %d: %s, no host kernels%s\n", b,
                  k.placement == MFSDP_OWNER ? "owners (gathered in place)" : "row shards",
                  cuda ? ", CUDA kernels" : "");
      continue;
    }
    // The layout, from the tables: member j's floats per rank and its
    // place in a rank's chunk.
    std::vector<int64_t> rel, len;
    const int64_t base = plan.memory->params[k.params[0]].master;
    for (int32_t j = 0; j < k.num_params; ++j) {
      const int32_t p = k.params[j];
      rel.push_back((plan.memory->params[p].master - base) /
                    static_cast<int64_t>(sizeof(float)));
      len.push_back(mfsdp::runtime::bufferFloats(plan.params[p], S, 0).master);
    }
    const int64_t chunk = rel.back() + len.back();
    // unpack: staging holds its index; members start as -1 sentinels with
    // one float of guard after them.
    std::vector<float> staging(static_cast<size_t>(S * chunk));
    for (size_t i = 0; i < staging.size(); ++i)
      staging[i] = static_cast<float>(i);
    std::vector<std::vector<float>> full(k.num_params);
    std::vector<float *> fullPtr;
    for (int32_t j = 0; j < k.num_params; ++j) {
      full[j].assign(static_cast<size_t>(S * len[j] + 1), -1.f);
      fullPtr.push_back(full[j].data());
    }
    int bad = plan.host_kernels[b].unpack(staging.data(), fullPtr.data(), nullptr) != 0;
    for (int32_t j = 0; j < k.num_params; ++j) {
      for (int64_t r = 0; r < S; ++r)
        for (int64_t e = 0; e < len[j]; ++e)
          bad += full[j][r * len[j] + e] != static_cast<float>(r * chunk + rel[j] + e);
      bad += full[j].back() != -1.f;
    }
    ++checked;
    failed += bad != 0;
    // pack: member j's float e holds 1000 j + e + 1, staging starts as NaN
    // with a guard after it.
    std::vector<std::vector<float>> grad(k.num_params);
    std::vector<const float *> gradPtr;
    for (int32_t j = 0; j < k.num_params; ++j) {
      grad[j].resize(static_cast<size_t>(S * len[j]));
      for (size_t e = 0; e < grad[j].size(); ++e)
        grad[j][e] = static_cast<float>(1000 * j + static_cast<int64_t>(e) + 1);
      gradPtr.push_back(grad[j].data());
    }
    std::vector<float> packed(static_cast<size_t>(S * chunk + 1), std::nanf(""));
    int badPack = plan.host_kernels[b].pack(gradPtr.data(), packed.data(), nullptr) != 0;
    for (int64_t r = 0; r < S; ++r) {
      std::vector<float> want(static_cast<size_t>(chunk), 0.f);
      for (int32_t j = 0; j < k.num_params; ++j)
        for (int64_t e = 0; e < len[j]; ++e)
          want[rel[j] + e] = grad[j][r * len[j] + e];
      for (int64_t o = 0; o < chunk; ++o)
        badPack += packed[r * chunk + o] != want[o]; // NaN left: a miss
    }
    badPack += !std::isnan(packed.back());
    ++checked;
    failed += badPack != 0;
    std::printf("bucket %d: row shards, %d members, %lld ranks x %lld floats: unpack %s, "
                "pack %s%s\n",
                b, k.num_params, static_cast<long long>(S), static_cast<long long>(chunk),
                bad ? "WRONG" : "ok", badPack ? "WRONG" : "ok",
                cuda ? ", CUDA kernels" : "");
  }
  std::printf("%d kernels checked, %d failed\n", checked, failed);
  return failed ? 1 : 0;
}
