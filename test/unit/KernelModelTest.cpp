//===- KernelModelTest.cpp - The per-kernel GPU roofline ------------------===//
//
// mfsdp/cost/KernelModel.h: GEMMs by shape, attention by sequence length
// and head dim, memory-bound work by bytes; the simulator pricing a unit's
// kernels one by one; the kernels in the graph format and the HF import.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/cost/KernelModel.h"
#include "mfsdp/cost/Simulator.h"
#include "mfsdp/graph/Graph.h"
#include "mfsdp/graph/HFConfig.h"
#include "mfsdp/planner/Hardware.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace mfsdp;
using namespace mfsdp::cost;
using planner::findHardwareProfile;
using planner::HardwareProfile;

namespace {

const HardwareProfile &h100() { return *findHardwareProfile("h100"); }

double rel(double a, double b) { return std::fabs(a - b) / std::fabs(b); }

TEST(KernelModel, LargeGemmsRunAtTheProfilesRate) {
  const HardwareProfile &p = h100();
  const double m = 16384, n = 8192, k = 8192;
  const double rate = p.gemmFlops * p.gemmEfficiency;
  const double expect = p.launchSeconds + (2 * m * n * k + p.smallGemmFlops) / rate;
  EXPECT_NEAR(gemmSeconds(m, n, k, p), expect, 1e-12);
}

TEST(KernelModel, SmallAndSkinnyGemmsRunFarFromPeak) {
  const HardwareProfile &p = h100();
  auto tflops = [&](double m, double n, double k) {
    return 2 * m * n * k / gemmSeconds(m, n, k, p) / 1e12;
  };
  const double large = tflops(16384, 8192, 8192);
  // A 768x768 projection over 256 tokens: launch- and size-bound.
  EXPECT_LT(tflops(256, 768, 768), 0.2 * large);
  // One row: memory-bound, the weight read once at HBM speed.
  const double bytes = 2.0 * (1 * 4096 + 4096 * 4096 + 1 * 4096);
  EXPECT_NEAR(gemmSeconds(1, 4096, 4096, p),
              p.launchSeconds + bytes / (p.hbmBytes * p.hbmEfficiency), 1e-12);
  EXPECT_EQ(gemmSeconds(0, 4096, 4096, p), 0);
}

TEST(KernelModel, AttentionRatesFollowTheProfileByHeadDimAndSequence) {
  const HardwareProfile &p = h100();
  ASSERT_EQ(p.attention.size(), 2u);
  const planner::AttentionRate &r64 = p.attention[0], &r128 = p.attention[1];
  EXPECT_NEAR(attentionRate(64, 2048, false, p), r64.fwdRate * 2048 / (2048 + r64.fwdSeq0), 1);
  EXPECT_NEAR(attentionRate(128, 4096, true, p),
              r128.fwdBwdRate * 4096 / (4096 + r128.fwdBwdSeq0), 1);
  // Between the two head dims: interpolated; beyond them: held at the ends.
  const double mid = attentionRate(96, 2048, false, p);
  EXPECT_NEAR(mid, (attentionRate(64, 2048, false, p) + attentionRate(128, 2048, false, p)) / 2,
              1);
  EXPECT_EQ(attentionRate(256, 2048, false, p), attentionRate(128, 2048, false, p));
  EXPECT_EQ(attentionRate(32, 2048, false, p), attentionRate(64, 2048, false, p));
  // Longer sequences run faster.
  EXPECT_LT(attentionRate(128, 512, true, p), attentionRate(128, 8192, true, p));
  // Without rates: the GEMM rate.
  HardwareProfile bare = p;
  bare.attention.clear();
  EXPECT_EQ(attentionRate(128, 4096, false, bare), p.gemmFlops * p.gemmEfficiency);
}

TEST(KernelModel, ProfilesAttentionRatesAreChecked) {
  for (const HardwareProfile &p : planner::hardwareProfiles())
    EXPECT_EQ(validateProfile(p), "") << p.name;
  HardwareProfile bad = h100();
  bad.attention[1].fwdRate = 0;
  EXPECT_NE(validateProfile(bad).find("attention rate 1 (head dim 128)"), std::string::npos)
      << validateProfile(bad);
  bad = h100();
  std::swap(bad.attention[0], bad.attention[1]);
  EXPECT_NE(validateProfile(bad).find("ascending head dim"), std::string::npos);
}

TEST(KernelModel, AttentionTimes) {
  const HardwareProfile &p = h100();
  // 4 sequences of 2048, 32 heads of 128.
  const double f = 2.0 * 4 * 32 * 2048.0 * 2048 * 256 / 2;
  const double fwd = attentionSeconds(4, 32, 128, 128, true, 2048, false, p);
  EXPECT_NEAR(fwd, p.launchSeconds + f / attentionRate(128, 2048, false, p), 1e-12);
  // Causal: half the work of full attention (less the launch).
  const double full = attentionSeconds(4, 32, 128, 128, false, 2048, false, p);
  EXPECT_NEAR(full - p.launchSeconds, 2 * (fwd - p.launchSeconds), 1e-12);
  // Backward: the pair's time less the forward's.
  const double both = 3.5 * f / attentionRate(128, 2048, true, p);
  const double bwd = attentionSeconds(4, 32, 128, 128, true, 2048, true, p);
  EXPECT_NEAR(bwd, p.launchSeconds + std::max(both - (fwd - p.launchSeconds), both * 2.5 / 3.5),
              1e-12);
  EXPECT_GT(bwd, fwd);
}

TEST(KernelModel, KernelsForwardAndBackward) {
  // The formulas without the eager dispatch floor (DispatchFloor below).
  HardwareProfile p = h100();
  p.dispatchSeconds = 0;
  const double tokens = 8192;
  // A GEMM's backward is its two products; `count` repeats it.
  UnitKernel g = UnitKernel::gemm(14336, 4096, 0.25, 8);
  const double m = 0.25 * tokens;
  EXPECT_NEAR(kernelSeconds(g, tokens, false, p), 8 * gemmSeconds(m, 14336, 4096, p), 1e-12);
  EXPECT_NEAR(kernelSeconds(g, tokens, true, p),
              8 * (gemmSeconds(m, 4096, 14336, p) + gemmSeconds(14336, 4096, m, p)), 1e-12);
  EXPECT_DOUBLE_EQ(kernelFlops(g, tokens, false), 8 * 2 * m * 14336 * 4096);
  EXPECT_DOUBLE_EQ(kernelFlops(g, tokens, true), 2 * kernelFlops(g, tokens, false));
  // Attention over tokens / seq sequences.
  UnitKernel a = UnitKernel::attention(32, 128, 128, true, 2048);
  EXPECT_NEAR(kernelSeconds(a, tokens, false, p),
              attentionSeconds(4, 32, 128, 128, true, 2048, false, p), 1e-12);
  // Memory work: bytes per token plus fixed bytes, twice backward.
  UnitKernel mem = UnitKernel::memory(100, 1000);
  const double bw = p.hbmBytes * p.hbmEfficiency;
  EXPECT_NEAR(kernelSeconds(mem, tokens, false, p), p.launchSeconds + (100 * tokens + 1000) / bw,
              1e-15);
  EXPECT_NEAR(kernelSeconds(mem, tokens, true, p),
              2 * p.launchSeconds + 2 * (100 * tokens + 1000) / bw, 1e-15);
  // Work of several kernels pays each launch.
  UnitKernel three = UnitKernel::memory(100, 0, 3);
  EXPECT_NEAR(kernelSeconds(three, tokens, false, p), 3 * p.launchSeconds + 100 * tokens / bw,
              1e-15);
  EXPECT_EQ(kernelFlops(mem, tokens, false), 0);
  // A malformed kernel costs nothing (the graph reader refuses it first).
  EXPECT_EQ(kernelSeconds(UnitKernel{KernelKind::Gemm, {1, 2}, 1}, tokens, false, p), 0);
  EXPECT_EQ(kernelsSeconds({g, a, mem}, tokens, false, p),
            kernelSeconds(g, tokens, false, p) + kernelSeconds(a, tokens, false, p) +
                kernelSeconds(mem, tokens, false, p));
}

TEST(KernelModel, DispatchFloor) {
  // An eager framework's host time per op bounds each operation from below:
  // tiny kernels cost the dispatch, large ones their device time.
  const HardwareProfile &p = h100();
  ASSERT_GT(p.dispatchSeconds, 0);
  EXPECT_EQ(gemmSeconds(16, 64, 64, p), p.dispatchSeconds);
  HardwareProfile bare = p;
  bare.dispatchSeconds = 0;
  EXPECT_EQ(gemmSeconds(16384, 8192, 8192, p), gemmSeconds(16384, 8192, 8192, bare));
  EXPECT_EQ(kernelSeconds(UnitKernel::memory(8, 0, 7), 64, false, p), 7 * p.dispatchSeconds);
  EXPECT_EQ(kernelSeconds(UnitKernel::memory(8, 0, 7), 64, true, p), 14 * p.dispatchSeconds);
  EXPECT_EQ(attentionSeconds(1, 1, 64, 64, true, 64, false, p), p.dispatchSeconds);
  HardwareProfile negative = p;
  negative.dispatchSeconds = -1;
  EXPECT_NE(validateProfile(negative).find("dispatchSeconds"), std::string::npos);
}

TEST(KernelModel, ProfileOverrides) {
  HardwareProfile p = h100();
  std::string error;
  ASSERT_TRUE(planner::applyProfileOverrides(p, "gemmEfficiency=0.5,launchSeconds=1e-6", error))
      << error;
  EXPECT_EQ(p.gemmEfficiency, 0.5);
  EXPECT_EQ(p.launchSeconds, 1e-6);
  p = h100();
  ASSERT_TRUE(planner::applyProfileOverrides(p, "computeScale=2,commScale=0.5", error)) << error;
  EXPECT_EQ(p.gemmEfficiency, 1.0); // held at 1
  EXPECT_EQ(p.hbmEfficiency, 1.0);
  EXPECT_DOUBLE_EQ(p.attention[1].fwdRate, 2 * h100().attention[1].fwdRate);
  EXPECT_DOUBLE_EQ(p.interBusBytes, 0.5 * h100().interBusBytes);
  EXPECT_FALSE(planner::applyProfileOverrides(p, "speed=3", error));
  EXPECT_NE(error.find("unknown key 'speed'"), std::string::npos) << error;
  EXPECT_FALSE(planner::applyProfileOverrides(p, "gemmEfficiency=fast", error));
  EXPECT_NE(error.find("'fast' is not a finite number"), std::string::npos) << error;
  EXPECT_FALSE(planner::applyProfileOverrides(p, "gemmEfficiency", error));
  EXPECT_NE(error.find("expected key=value"), std::string::npos) << error;
  // The caching allocator's reserve: settable, and below 1 refused.
  p = h100();
  ASSERT_TRUE(planner::applyProfileOverrides(p, "allocatorReserve=1.2", error)) << error;
  EXPECT_EQ(p.allocatorReserve, 1.2);
  EXPECT_EQ(validateProfile(p), "");
  p.allocatorReserve = 0.9;
  EXPECT_NE(validateProfile(p).find("allocatorReserve must be at least 1"), std::string::npos);
}

TEST(KernelModel, ValidateKernel) {
  EXPECT_EQ(validateKernel(UnitKernel::gemm(1, 2, 1, 3)), "");
  EXPECT_NE(validateKernel(UnitKernel{KernelKind::Gemm, {1, 2}, 1}), "");
  EXPECT_NE(validateKernel(UnitKernel{KernelKind::Gemm, {1, 0, 1}, 1}), "");
  EXPECT_EQ(validateKernel(UnitKernel::attention(8, 64, 64, false, 128)), "");
  EXPECT_NE(validateKernel(UnitKernel{KernelKind::Attention, {8, 64, 64, 2, 128}, 1}), "");
  EXPECT_EQ(validateKernel(UnitKernel::memory(4)), "");
  EXPECT_EQ(validateKernel(UnitKernel::memory(4, 0, 3)), "");
  EXPECT_NE(validateKernel(UnitKernel{KernelKind::Memory, {1, 0}, 4}), "");
  EXPECT_NE(validateKernel(UnitKernel{KernelKind::Memory, {1, 2, 3}, 4}), "");
  EXPECT_NE(validateKernel(UnitKernel{KernelKind::Memory, {}, -1}), "");
}

TEST(KernelModel, TheSimulatorPricesAUnitsKernels) {
  const HardwareProfile &p = h100();
  step::Op op;
  op.kind = step::OpKind::Compute;
  op.compute = "forward";
  op.flops = 1e12;
  const double flat = computeSeconds(op, p);
  op.kernels = {UnitKernel::gemm(4096, 4096), UnitKernel::memory(64)};
  op.kernelTokens = 8192;
  EXPECT_NEAR(computeSeconds(op, p), kernelsSeconds(op.kernels, 8192, false, p), 1e-15);
  EXPECT_NE(computeSeconds(op, p), flat);
  op.compute = "backward";
  EXPECT_NEAR(computeSeconds(op, p), kernelsSeconds(op.kernels, 8192, true, p), 1e-15);
  op.compute = "recompute";
  EXPECT_NEAR(computeSeconds(op, p), kernelsSeconds(op.kernels, 8192, false, p), 1e-15);
  // A copy never uses them; no tokens: the FLOP count.
  op.compute = "forward";
  op.kernelTokens = 0;
  EXPECT_EQ(computeSeconds(op, p), flat);
}

TEST(KernelModel, GraphFormatCarriesKernels) {
  graph::Graph g;
  g.model = "m";
  g.seqLen = 128;
  graph::Param w;
  w.name = "w";
  w.shape = {64, 32};
  w.dtype = DType::BF16;
  g.params.push_back(w);
  graph::Unit u;
  u.name = "u";
  u.params = {"w"};
  u.cost.fwdFlopsPerToken = 2 * 64 * 32;
  u.cost.bwdFlopsPerToken = 4 * 64 * 32;
  u.cost.kernels = {UnitKernel::gemm(64, 32), UnitKernel::attention(4, 8, 8, true, 128),
                    UnitKernel::memory(12.5, 7)};
  g.units.push_back(u);
  const std::string text = graph::writeGraph(g);
  graph::Graph back;
  graph::Diagnostic d;
  ASSERT_TRUE(graph::parseGraph(text, back, d)) << d.pointer << ": " << d.message;
  EXPECT_EQ(back.units[0].cost.kernels, u.cost.kernels);
  // A malformed kernel is refused where it stands.
  std::string bad = text;
  const std::string from = "\"shape\": [64, 32, 1]";
  ASSERT_NE(bad.find(from), std::string::npos) << text;
  bad.replace(bad.find(from), from.size(), "\"shape\": [64, 32]");
  EXPECT_FALSE(graph::parseGraph(bad, back, d));
  EXPECT_EQ(d.pointer, "/units/0/cost/kernels/0");
  EXPECT_NE(d.message.find("[n, k, count]"), std::string::npos) << d.message;
}

/// examples/hf/<name>, found beside this source file (or from
/// MFSDP_SOURCE_DIR when the build defines it).
std::string readExample(const std::string &name) {
  std::vector<std::string> roots;
#ifdef MFSDP_SOURCE_DIR
  roots.push_back(MFSDP_SOURCE_DIR);
#endif
  const std::string file = __FILE__;
  const size_t cut = file.rfind("test/unit/");
  if (cut != std::string::npos)
    roots.push_back(file.substr(0, cut));
  roots.push_back(".");
  for (const std::string &r : roots) {
    std::ifstream in(r + "/examples/hf/" + name);
    if (in) {
      std::stringstream ss;
      ss << in.rdbuf();
      return ss.str();
    }
  }
  ADD_FAILURE() << "cannot find examples/hf/" << name;
  return "";
}

TEST(KernelModel, HFImportListsEachLayersKernels) {
  graph::Graph g;
  graph::Diagnostic d;
  graph::HFImportOptions opts;
  opts.seqLen = 2048;
  ASSERT_TRUE(graph::graphFromHFConfig(readExample("llama-3.2-1b.json"), opts, g, d))
      << d.message;
  const graph::Unit &layer = g.units[1];
  ASSERT_EQ(layer.name, "model.layers.0");
  std::vector<UnitKernel> gemms;
  double gemmFlops = 0;
  for (const UnitKernel &k : layer.cost.kernels)
    if (k.kind == KernelKind::Gemm) {
      gemms.push_back(k);
      gemmFlops += kernelFlops(k, 1, false);
    }
  // Equal products coalesced (gate and up, q and o, k and v), largest n
  // first: gate and up, down, q and o, k and v.
  const std::vector<UnitKernel> expect = {
      UnitKernel::gemm(8192, 2048, 1, 2), UnitKernel::gemm(2048, 8192),
      UnitKernel::gemm(2048, 2048, 1, 2), UnitKernel::gemm(512, 2048, 1, 2)};
  EXPECT_EQ(gemms, expect);
  // Their FLOPs plus attention's are the unit's forward FLOPs.
  double attn = 0;
  for (const UnitKernel &k : layer.cost.kernels)
    if (k.kind == KernelKind::Attention) {
      EXPECT_EQ(k, UnitKernel::attention(32, 64, 64, true, 2048));
      attn += kernelFlops(k, 2048, false) / 2048;
    }
  EXPECT_LT(rel(gemmFlops + attn, layer.cost.fwdFlopsPerToken), 1e-12);
  // The head: the output GEMM over the vocabulary.
  const graph::Unit &head = g.units.back();
  bool vocab = false;
  for (const UnitKernel &k : head.cost.kernels)
    vocab |= k == UnitKernel::gemm(128256, 2048);
  EXPECT_TRUE(vocab);
}

TEST(KernelModel, HFImportRoutesExpertGemmsToTheirShareOfTokens) {
  graph::Graph g;
  graph::Diagnostic d;
  ASSERT_TRUE(graph::graphFromHFConfig(readExample("tiny-mixtral.json"), {}, g, d))
      << d.message;
  const graph::Unit &layer = g.units[1];
  double expertRows = -1;
  int64_t count = 0;
  for (const UnitKernel &k : layer.cost.kernels)
    if (k.kind == KernelKind::Gemm && k.scale < 1) {
      expertRows = k.scale;
      count += k.shape[2];
    }
  // Mixtral: 2 of the experts per token; every expert's three matrices.
  EXPECT_GT(expertRows, 0);
  EXPECT_GT(count, 0);
  double gemmFlops = 0, attn = 0;
  for (const UnitKernel &k : layer.cost.kernels) {
    if (k.kind == KernelKind::Gemm)
      gemmFlops += kernelFlops(k, 1, false);
    if (k.kind == KernelKind::Attention)
      attn += kernelFlops(k, static_cast<double>(k.shape[4]), false) /
              static_cast<double>(k.shape[4]);
  }
  EXPECT_LT(rel(gemmFlops + attn, layer.cost.fwdFlopsPerToken), 1e-12);
}

} // namespace
