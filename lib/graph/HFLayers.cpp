//===- HFLayers.cpp - A decoder layer of a Hugging Face model -------------===//
//
// The parameters of one decoder layer, in transformers' module registration
// order (HFConfig.cpp says how they are named), and its cost.
//
// Cost model, per token, with s = opts.seqLen:
//
//   decoder layer
//     fwd  = 2 * W_active + 2 * s * heads * (qk_head_dim + v_head_dim) * 0.5
//            W_active: elements of the 2-D matmul weights a token goes
//            through -- every attention and dense-MLP weight; in MoE layers
//            the router, the shared experts and num_experts_per_tok routed
//            experts (biases and norms are not counted). The second term is
//            QK^T and AV of causal attention (the mask halves the work).
//            qk_head_dim = v_head_dim = head_dim for GQA; for MLA
//            qk_head_dim = qk_nope_head_dim + qk_rope_head_dim, v_head_dim
//            as configured.
//     bwd  = 2 * fwd
//     activation bytes = 16*H + 2*(q_dim + k_dim + v_dim) + 4*o_dim
//            + 4*heads + 8*active_I (+ 6*(q_dim + k_dim) with per-head q/k
//            norms): the tensors transformers' eager modules save for
//            backward in bf16 (layerCost says which), with q_dim = heads *
//            qk_head_dim, k_dim = v_dim = kv_heads * head_dim for GQA and
//            heads * qk_head_dim, heads * v_head_dim for MLA (K and V after
//            the up-projection), o_dim = heads * v_head_dim, active_I =
//            intermediate size for a dense MLP, num_experts_per_tok *
//            moe_intermediate_size plus the shared experts' intermediate
//            size for MoE.
//     with opts.recompute: activation bytes = 2 * H (the layer input only)
//            and recompute = true.
//   embedding unit: fwd = bwd = 0, activation bytes = 0.
//   lm_head unit:   fwd = 2 * vocab * H, bwd = 2 * fwd,
//                   activation bytes = 8 * H + 12 * vocab (the norm and
//                   projection inputs, the fp32 log-softmax, and the two
//                   fp32 logit gradients of the loss's backward).
//
// Each unit also lists its forward's kernels (UnitCost::kernels,
// mfsdp/Kernel.h) for the per-op cost model: every 2-D Linear, Router and
// Expert weight as a GEMM (experts on top_k / num_experts of the tokens;
// equal products coalesced), causal attention at s, and the memory-bound
// work of transformers' eager modules counted in bytes and kernels
// (layerKernels below; the embedding's lookup; the head's norm and loss).
////===----------------------------------------------------------------------===//
#include "HFArch.h"

#include <fmt/format.h>

#include <algorithm>

namespace mfsdp::graph::hf {

LayerWork buildLayer(Builder &b, const Arch &a, int64_t i) {
  LayerWork w;
  const std::string L = fmt::format("model.layers.{}", i);
  const std::string at = L + ".self_attn";
  const int64_t H = a.H;

  // Attention.
  if (!a.mla) {
    const int64_t hd = a.headDim;
    w.activeWeights += b.linear(at + ".q_proj", a.heads * hd, H, a.qkvBias);
    w.activeWeights += b.linear(at + ".k_proj", a.kvHeads * hd, H, a.qkvBias);
    w.activeWeights += b.linear(at + ".v_proj", a.kvHeads * hd, H, a.qkvBias);
    w.activeWeights += b.linear(at + ".o_proj", H, a.heads * hd, a.oBias);
    if (a.qkNorm) {
      b.norm(at + ".q_norm", hd);
      b.norm(at + ".k_norm", hd);
    }
  } else {
    const int64_t qk = a.qkHeadDim();
    if (!a.qLora) {
      w.activeWeights += b.linear(at + ".q_proj", a.heads * qk, H, false);
    } else {
      w.activeWeights += b.linear(at + ".q_a_proj", *a.qLora, H, a.attnBias);
      b.norm(at + ".q_a_layernorm", *a.qLora);
      w.activeWeights +=
          b.linear(at + ".q_b_proj", a.heads * qk, *a.qLora, false);
    }
    w.activeWeights += b.linear(at + ".kv_a_proj_with_mqa", a.kvLora + a.qkRope,
                                H, a.attnBias);
    b.norm(at + ".kv_a_layernorm", a.kvLora);
    w.activeWeights += b.linear(
        at + ".kv_b_proj", a.heads * (a.qkNope + a.vHead), a.kvLora, false);
    w.activeWeights +=
        b.linear(at + ".o_proj", H, a.heads * a.vHead, a.attnBias);
  }

  // MLP.
  auto gatedMLP = [&](const std::string &m, int64_t inter, bool bias,
                      ModuleKind kind) {
    int64_t n = 0;
    n += b.linear(m + ".gate_proj", inter, H, bias, kind);
    n += b.linear(m + ".up_proj", inter, H, bias, kind);
    n += b.linear(m + ".down_proj", H, inter, bias, kind);
    return n;
  };
  // transformers 5's routed experts: gate_up_proj [E, 2I, H] and
  // down_proj [E, H, I] of one module, written as their matrices, e-major.
  auto fusedExperts = [&](const std::string &m) {
    const std::string e = m + ".experts";
    for (int64_t j = 0; j < a.experts; ++j) {
      b.add(e, fmt::format("gate_up_proj.{}.gate", j), {a.moeInter, H},
            ModuleKind::Expert);
      b.add(e, fmt::format("gate_up_proj.{}.up", j), {a.moeInter, H},
            ModuleKind::Expert);
    }
    for (int64_t j = 0; j < a.experts; ++j)
      b.add(e, fmt::format("down_proj.{}", j), {H, a.moeInter},
            ModuleKind::Expert);
    return 3 * a.moeInter * H; // per expert
  };
  auto router = [&](const std::string &m) {
    return b.linear(m + ".gate", a.experts, H, false, ModuleKind::Router);
  };
  const bool v5 = a.transformers >= 5;
  const bool sparse = a.sparse[static_cast<size_t>(i)];
  if (!sparse) {
    w.activeWeights +=
        gatedMLP(L + ".mlp", a.inter, a.mlpBias, ModuleKind::Linear);
    w.activeInter = static_cast<double>(a.inter);
  } else if (a.moe == MoEStyle::Mixtral) {
    int64_t perExpert = 0;
    if (v5) {
      const std::string m = L + ".mlp";
      w.activeWeights += router(m);
      perExpert = fusedExperts(m);
    } else {
      const std::string m = L + ".block_sparse_moe";
      w.activeWeights += router(m);
      for (int64_t j = 0; j < a.experts; ++j) {
        const std::string e = fmt::format("{}.experts.{}", m, j);
        perExpert =
            b.linear(e + ".w1", a.moeInter, H, false, ModuleKind::Expert) +
            b.linear(e + ".w2", H, a.moeInter, false, ModuleKind::Expert) +
            b.linear(e + ".w3", a.moeInter, H, false, ModuleKind::Expert);
      }
    }
    w.activeWeights += static_cast<double>(a.topK) * perExpert;
    w.activeInter = static_cast<double>(a.topK * a.moeInter);
  } else if (a.moe == MoEStyle::Qwen3Moe) {
    const std::string m = L + ".mlp";
    int64_t perExpert = 0;
    if (v5) {
      perExpert = fusedExperts(m);
      w.activeWeights += router(m);
    } else {
      w.activeWeights += router(m);
      for (int64_t j = 0; j < a.experts; ++j)
        perExpert = gatedMLP(fmt::format("{}.experts.{}", m, j), a.moeInter,
                             false, ModuleKind::Expert);
    }
    w.activeWeights += static_cast<double>(a.topK) * perExpert;
    w.activeInter = static_cast<double>(a.topK * a.moeInter);
  } else { // DeepSeek
    const std::string m = L + ".mlp";
    int64_t perExpert = 0;
    if (v5) {
      perExpert = fusedExperts(m);
    } else {
      for (int64_t j = 0; j < a.experts; ++j)
        perExpert = gatedMLP(fmt::format("{}.experts.{}", m, j), a.moeInter,
                             false, ModuleKind::Expert);
    }
    w.activeWeights += static_cast<double>(a.topK) * perExpert;
    w.activeWeights += router(m);
    w.activeInter = static_cast<double>(a.topK * a.moeInter);
    if (a.shared > 0) {
      w.activeWeights += gatedMLP(m + ".shared_experts", a.moeInter * a.shared,
                                  false, ModuleKind::Linear);
      w.activeInter += static_cast<double>(a.moeInter * a.shared);
    }
  }

  b.norm(L + ".input_layernorm", H);
  b.norm(L + ".post_attention_layernorm", H);
  return w;
}

UnitCost layerCost(const Arch &a, const LayerWork &w,
                   const HFImportOptions &o) {
  const double s = static_cast<double>(o.seqLen);
  const double heads = static_cast<double>(a.heads);
  const double qk = static_cast<double>(a.qkHeadDim());
  const double v = static_cast<double>(a.vHeadDim());
  const double H = static_cast<double>(a.H);
  UnitCost c;
  c.fwdFlopsPerToken = 2.0 * w.activeWeights + 2.0 * s * heads * (qk + v) * 0.5;
  c.bwdFlopsPerToken = 2.0 * c.fwdFlopsPerToken;
  // What transformers' eager modules save for backward, in bf16 (the
  // log-sum-exp in fp32): each RMSNorm its fp32 input and bf16 result (6H),
  // the attention and MLP projections their inputs (2H each), attention q,
  // k, v and its output (flash attention, no s^2 term) and the output
  // projection its input, per-head q/k norms where the model has them (6
  // per element), SiLU its input and the product both factors, the down
  // projection its input (8 per intermediate element).
  const double qDim = heads * qk;
  const double kDim = a.mla ? heads * qk
                            : static_cast<double>(a.kvHeads) * static_cast<double>(a.headDim);
  const double vDim = a.mla ? heads * v : kDim;
  const double oDim = heads * v;
  c.activationBytesPerToken = 16.0 * H + 2.0 * (qDim + kDim + vDim) + 4.0 * oDim +
                              4.0 * heads + 8.0 * w.activeInter +
                              (a.qkNorm ? 6.0 * (qDim + kDim) : 0.0);
  if (o.recompute) {
    c.activationBytesPerToken = 2.0 * H;
    c.recompute = true;
  }
  return c;
}

namespace {

/// The GEMMs of the 2-D matmul weights params[first..] (a layer's): each
/// Linear and Router weight [n, k] once per token, each Expert weight on
/// topK / experts of the tokens; equal products coalesced into a count.
/// Only into an empty `out` (the sort below orders all of it).
void addGemms(const std::vector<Param> &params, size_t first, const Arch &a,
              std::vector<UnitKernel> &out) {
  for (size_t i = first; i < params.size(); ++i) {
    const Param &p = params[i];
    if (p.shape.size() != 2 || (p.kind != ModuleKind::Linear && p.kind != ModuleKind::Router &&
                                p.kind != ModuleKind::Expert))
      continue;
    const double rows = p.kind == ModuleKind::Expert && a.experts > 0
                            ? static_cast<double>(a.topK) / static_cast<double>(a.experts)
                            : 1.0;
    UnitKernel k = UnitKernel::gemm(p.shape[0], p.shape[1], rows);
    auto same = std::find_if(out.begin(), out.end(), [&](const UnitKernel &o) {
      return o.kind == KernelKind::Gemm && o.shape[0] == k.shape[0] &&
             o.shape[1] == k.shape[1] && o.scale == k.scale;
    });
    if (same != out.end())
      ++same->shape[2];
    else
      out.push_back(std::move(k));
  }
  // One order whatever the order of the weights (transformers 4 and 5 list
  // the experts' matrices differently): the dense products first, then by
  // n and k, largest first.
  std::stable_sort(out.begin(), out.end(), [](const UnitKernel &x, const UnitKernel &y) {
    if (x.scale != y.scale)
      return x.scale > y.scale;
    if (x.shape[0] != y.shape[0])
      return x.shape[0] > y.shape[0];
    return x.shape[1] > y.shape[1];
  });
}

} // namespace

/// A decoder layer's kernels per token (the cost model's per-op roofline,
/// mfsdp/Kernel.h): its GEMMs, causal attention at the sequence length, and
/// the memory-bound work of transformers' eager modules in bf16, counted in
/// bytes read plus written per element and in kernels: RMSNorm 36 in 7
/// (to fp32, square, mean, add and rsqrt, scale, back to bf16, weight; per
/// head on q and k too where the model has q_norm and k_norm), rotary
/// embedding on q and k 22 in 5 each (two products, the half rotation's
/// negation and concatenation, the sum), the repeat of k and v to the
/// query heads under GQA 4 per query element in 2, the attention output's
/// transpose 4 in 1, each residual add 6 in 1, SiLU(gate) * up 10 per
/// intermediate element in 2.
std::vector<UnitKernel> layerKernels(const std::vector<Param> &params, size_t first,
                                     const Arch &a, const LayerWork &w,
                                     const HFImportOptions &o) {
  std::vector<UnitKernel> k;
  addGemms(params, first, a, k);
  k.push_back(UnitKernel::attention(a.heads, a.qkHeadDim(), a.vHeadDim(), true, o.seqLen));
  const double H = static_cast<double>(a.H);
  const double qDim = static_cast<double>(a.heads * a.qkHeadDim());
  const double vDim = static_cast<double>(a.heads * a.vHeadDim());
  const double kvDim = a.mla ? qDim : static_cast<double>(a.kvHeads * a.headDim);
  k.push_back(UnitKernel::memory(2 * 36.0 * H, 0, 2 * 7));         // the two RMSNorms
  if (a.qkNorm)
    k.push_back(UnitKernel::memory(36.0 * (qDim + kvDim), 0, 2 * 7)); // q_norm, k_norm
  k.push_back(UnitKernel::memory(22.0 * (qDim + kvDim), 0, 2 * 5)); // rotary on q and k
  if (!a.mla && a.kvHeads > 0 && a.kvHeads < a.heads)
    k.push_back(UnitKernel::memory(4.0 * (qDim + vDim), 0, 2));     // repeat_kv
  k.push_back(UnitKernel::memory(4.0 * vDim));                    // output transpose
  k.push_back(UnitKernel::memory(2 * 6.0 * H, 0, 2));             // two residual adds
  k.push_back(UnitKernel::memory(10.0 * w.activeInter, 0, 2));    // SiLU(gate) * up
  return k;
}

} // namespace mfsdp::graph::hf
