//===- EmitStep.cpp - Planned IR to the source of a step library ----------===//
//
// The generated library is C (any host compiler builds it; no C++ runtime
// is needed in the trainer) and holds only constants and two functions:
//
//   const mfsdp_plan *mfsdp_step_plan(void);
//   mfsdp_status mfsdp_step_create(mfsdp_step **out);
//
// The plan's hash is computed here with the runtime's own function
// (mfsdp/runtime/PlanHash.h) and written as a constant, so a library whose
// tables were edited, or a runtime of another version, is refused at
// mfsdp_create.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/emit/EmitStep.h"
#include "mfsdp/emit/RuntimePlan.h"

#include "dialects/plan/PlanOps.h"
#include "dialects/sched/SchedDialect.h"
#include "dialects/sched/SchedOps.h"
#include "dialects/sched/StepBridge.h"
#include "mfsdp/import/PlanImport.h"
#include "mfsdp/runtime/BufferSizes.h"
#include "mfsdp/runtime/PlanHash.h"
#include "mfsdp/step/RuntimeMemory.h"
#include "mfsdp/step/RuntimeProgram.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"

#include <cmath>
#include <cstdio>
#include <functional>
#include <cstdlib>
#include <deque>
#include <optional>
#include <string>
#include <vector>

using namespace mlir;
using namespace mfsdp;
using namespace mfsdp::plan;

namespace {

/// A C string literal for `s`.
std::string cString(StringRef s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\%03o", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

/// `s` safe inside a C comment (block or line): no comment delimiters, no
/// line breaks or other control characters.
std::string commentText(StringRef s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      out += '?';
      continue;
    }
    out += static_cast<char>(c);
    // "*/" and "/*" get a space between: neither ends nor opens a comment.
    if ((c == '*' || c == '/') && i + 1 < s.size() && s[i + 1] == (c == '*' ? '/' : '*'))
      out += ' ';
  }
  return out;
}

/// A C float literal that reads back as exactly `f`.
std::string cFloat(float f) {
  char buf[64];
  for (int digits = 6; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*g", digits, static_cast<double>(f));
    if (std::strtof(buf, nullptr) == f)
      break; // the shortest that reads back exactly
  }
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos)
    s += ".0";
  return s + "f";
}

// The C enumerators of the plan table come from the vocabulary's lists.
const char *placementName(int32_t p) {
  return enumCName(static_cast<mfsdp::Placement>(p));
}

const char *computeName(int32_t c) {
  return enumCName(static_cast<mfsdp::ComputeDType>(c));
}

const char *optimizerName(int32_t o) {
  return enumCName(static_cast<mfsdp::Optimizer>(o));
}

/// A row-shard bucket as its generated kernels see it: every rank's chunk
/// of `chunk` floats, member j's `len[j]` floats at `rel[j]` in it.
struct RowBucketLayout {
  size_t index = 0;
  int64_t unit = 0, ranks = 1, chunk = 0;
  std::vector<int64_t> rel, len;
  std::vector<std::string> names;
};

/// The host kernels of `b`: C, a copy per member and rank.
void emitHostKernels(raw_ostream &os, const RowBucketLayout &b) {
  const size_t M = b.rel.size();
  os << "/* Bucket " << b.index << " (unit " << b.unit << "): " << b.ranks
     << " ranks x a chunk of " << b.chunk << " floats;";
  for (size_t j = 0; j < M; ++j)
    os << " " << commentText(b.names[j]) << " " << b.len[j] << " at " << b.rel[j] << ";";
  os << " */\n";
  os << "static int mfsdp_unpack_" << b.index
     << "(const float *staging, float *const *full, void *stream) {\n"
     << "  (void)stream;\n"
     << "  for (int64_t r = 0; r < " << b.ranks << "; ++r) {\n"
     << "    const float *chunk = staging + r * " << b.chunk << ";\n";
  for (size_t j = 0; j < M; ++j)
    os << "    memcpy(full[" << j << "] + r * " << b.len[j] << ", chunk + " << b.rel[j]
       << ", " << b.len[j] << " * sizeof(float));\n";
  os << "  }\n  return 0;\n}\n\n";
  os << "static int mfsdp_pack_" << b.index
     << "(const float *const *grad, float *staging, void *stream) {\n"
     << "  (void)stream;\n"
     << "  for (int64_t r = 0; r < " << b.ranks << "; ++r) {\n"
     << "    float *chunk = staging + r * " << b.chunk << ";\n";
  int64_t end = 0;
  for (size_t j = 0; j < M; ++j) {
    if (b.rel[j] > end)
      os << "    memset(chunk + " << end << ", 0, " << b.rel[j] - end
         << " * sizeof(float));\n";
    os << "    memcpy(chunk + " << b.rel[j] << ", grad[" << j << "] + r * " << b.len[j]
       << ", " << b.len[j] << " * sizeof(float));\n";
    end = b.rel[j] + b.len[j];
  }
  os << "  }\n  return 0;\n}\n\n";
}

/// The decision over the members of `b` in [lo, hi) for offset `o` of a
/// chunk: a balanced tree on their starts, then `leaf(j)`.
void emitMemberTree(raw_ostream &os, const RowBucketLayout &b, size_t lo, size_t hi,
                    const std::string &indent,
                    const std::function<void(size_t, const std::string &)> &leaf) {
  if (hi - lo == 1) {
    os << indent << "if (o >= " << b.rel[lo] << " && o < " << b.rel[lo] + b.len[lo]
       << ") {\n";
    leaf(lo, indent + "  ");
    os << indent << "}\n";
    return;
  }
  const size_t mid = (lo + hi) / 2;
  os << indent << "if (o < " << b.rel[mid] << ") {\n";
  emitMemberTree(os, b, lo, mid, indent + "  ", leaf);
  os << indent << "} else {\n";
  emitMemberTree(os, b, mid, hi, indent + "  ", leaf);
  os << indent << "}\n";
}

/// The CUDA kernels of `b` (one thread per float of the staging buffer,
/// the member found by a balanced tree on the constant offsets), or with
/// `launchers` their C launchers.
void emitCudaKernels(raw_ostream &os, const RowBucketLayout &b, bool launchers) {
  const size_t M = b.rel.size();
  const int64_t total = b.ranks * b.chunk;
  auto params = [&](const char *type, const char *name) {
    std::string out;
    for (size_t j = 0; j < M; ++j)
      out += std::string(j ? ", " : "") + type + " *__restrict__ " + name +
             std::to_string(j);
    return out;
  };
  auto prologue = [&]() {
    os << "  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + "
          "threadIdx.x;\n"
       << "  if (i >= " << total << ") return;\n"
       << "  const int64_t r = i / " << b.chunk << ", o = i - r * " << b.chunk << ";\n";
  };
  const int64_t blocks = (total + 255) / 256;
  auto args = [&](const char *name) {
    std::string out;
    for (size_t j = 0; j < M; ++j)
      out += std::string(j ? ", " : "") + name + "[" + std::to_string(j) + "]";
    return out;
  };
  if (launchers) {
    // Hidden: every step library names its launchers alike, and a table
    // entry must reach this library's own, not another loaded library's.
    os << "extern \"C\" __attribute__((visibility(\"hidden\"))) int mfsdp_cuda_unpack_"
       << b.index
       << "(const float *staging, float *const *full, void *stream) {\n"
       << "  unpack" << b.index << "<<<" << blocks
       << ", 256, 0, static_cast<cudaStream_t>(stream)>>>(staging, " << args("full")
       << ");\n"
       << "  return cudaGetLastError() == cudaSuccess ? 0 : 1;\n}\n\n";
    os << "extern \"C\" __attribute__((visibility(\"hidden\"))) int mfsdp_cuda_pack_"
       << b.index
       << "(const float *const *grad, float *staging, void *stream) {\n"
       << "  pack" << b.index << "<<<" << blocks
       << ", 256, 0, static_cast<cudaStream_t>(stream)>>>(" << args("grad")
       << ", staging);\n"
       << "  return cudaGetLastError() == cudaSuccess ? 0 : 1;\n}\n\n";
    return;
  }
  os << "// Bucket " << b.index << " (unit " << b.unit << "): " << b.ranks
     << " ranks x a chunk of " << b.chunk << " floats.\n";
  os << "__global__ void unpack" << b.index << "(const float *__restrict__ staging, "
     << params("float", "full") << ") {\n";
  prologue();
  emitMemberTree(os, b, 0, M, "  ", [&](size_t j, const std::string &in) {
    os << in << "full" << j << "[r * " << b.len[j] << " + (o - " << b.rel[j]
       << ")] = staging[i];\n";
  });
  os << "}\n\n";
  os << "__global__ void pack" << b.index << "(" << params("const float", "grad")
     << ", float *__restrict__ staging) {\n";
  prologue();
  os << "  float v = 0.f; // the gaps are zeros\n";
  emitMemberTree(os, b, 0, M, "  ", [&](size_t j, const std::string &in) {
    os << in << "v = grad" << j << "[r * " << b.len[j] << " + (o - " << b.rel[j]
       << ")];\n";
  });
  os << "  staging[i] = v;\n}\n\n";
}

} // namespace

LogicalResult mfsdp::emitStepLibrarySource(ModuleOp module, raw_ostream &os,
                                           const EmitStepOptions &options,
                                           raw_ostream *cuda) {
  // The plan, its buckets, program and memory plan, as mfsdp-sim reports
  // them too.
  LibraryPlan library;
  if (failed(buildLibraryPlan(module, options, library)))
    return failure();
  GraphOp graph = library.graph;
  RuntimePlan &runtimePlan = library.runtime;
  mfsdp_plan &plan = runtimePlan.plan;
  MeshOp mesh = runtimePlan.mesh;
  PolicyOp policy = runtimePlan.policy;
  const std::vector<mfsdp_param_desc> &descs = runtimePlan.descs;
  const std::vector<mfsdp_mesh_dim> &meshDims = runtimePlan.meshDims;
  const int64_t numExternal = runtimePlan.numExternal;
  const std::vector<std::string> &externalDims = runtimePlan.externalDims;
  const std::vector<step::RuntimeBucket> &buckets = runtimePlan.buckets;
  const step::RuntimeProgram &program = library.program;
  const bool withProgram = library.withProgram;
  const step::RuntimeMemoryPlan &memory = library.memory;
  const mfsdp_memory_plan &memoryPlan = library.memoryView;

  // The row-shard buckets' layouts, for their generated kernels: one
  // rank's chunk is the members' masters as the memory plan lays them out.
  std::vector<RowBucketLayout> rowBuckets;
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (buckets[b].placement != MFSDP_ROW_SHARD)
      continue;
    RowBucketLayout l;
    l.index = b;
    l.unit = buckets[b].unit;
    l.ranks = plan.dp_shard;
    const int64_t base = memory.params[buckets[b].params.front()].master;
    for (int32_t p : buckets[b].params) {
      l.rel.push_back((memory.params[p].master - base) /
                      static_cast<int64_t>(sizeof(float)));
      l.len.push_back(runtime::bufferFloats(descs[p], plan.dp_shard, 0).master);
      l.names.push_back(descs[p].name);
    }
    l.chunk = l.rel.back() + l.len.back();
    rowBuckets.push_back(std::move(l));
  }
  const bool cudaKernels = cuda && !rowBuckets.empty();

  // The source.
  std::string meshText;
  for (auto [n, s] : llvm::zip(mesh.getDimNames(), mesh.getDimSizes())) {
    if (!meshText.empty())
      meshText += ",";
    meshText += cast<StringAttr>(n).getValue().str() + "=" + std::to_string(s);
  }
  os << "/* The step library of plan.graph @" << commentText(graph.getSymName())
     << ", generated by mfsdp (--emit-step-c).\n"
     << " * mesh " << commentText(meshText) << " (world " << plan.world << "), policy "
     << stringifyPolicyKind(policy.getKind()) << ", ZeRO-" << plan.zero << ", "
     << plan.num_params << " parameters in " << plan.num_units << " units.\n";
  if (numExternal) {
    std::string dims;
    for (const std::string &d : externalDims)
      dims += (dims.empty() ? "" : ", ") + d;
    os << " * " << numExternal << " external parameter"
       << (numExternal == 1 ? "" : "s") << " left out (owned by " << commentText(dims)
       << "): the outer stack keeps them.\n";
  }
  os << " * Do not edit: the runtime checks the plan hash. */\n"
     << "#include <mfsdp/runtime.h>\n";
  if (!rowBuckets.empty())
    os << "#include <string.h>\n";
  os << "\n";
  if (!meshDims.empty()) {
    os << "/* The device mesh, row-major (the last dim varies fastest). */\n"
       << "static const mfsdp_mesh_dim mfsdp_mesh[" << meshDims.size() << "] = {";
    for (size_t i = 0; i < meshDims.size(); ++i)
      os << (i ? ", " : "") << "{" << cString(meshDims[i].name) << ", "
         << meshDims[i].size << "}";
    os << "};\n\n";
  }
  os << "static const mfsdp_param_desc mfsdp_params[" << std::max(1, plan.num_params)
     << "] = {\n";
  os << "  /* name, rows, cols, unit, placement, owner, optimizer, compute dtype, "
        "block rows, block cols */\n";
  for (const mfsdp_param_desc &d : descs)
    os << "  {" << cString(d.name) << ", " << d.rows << ", " << d.cols << ", "
       << d.unit << ", " << placementName(d.placement) << ", " << d.owner
       << ", " << optimizerName(d.optimizer) << ", "
       << computeName(d.compute_dtype) << ", " << d.block_rows << ", "
       << d.block_cols << "},\n";
  if (descs.empty())
    os << "  {0, 0, 0, 0, 0, 0, 0, 0, 0, 0},\n";
  os << "};\n\n";
  // The memory plan.
  auto list = [&](const std::vector<int64_t> &v) {
    std::string out;
    for (size_t i = 0; i < v.size(); ++i)
      out += (i ? ", " : "") + std::to_string(v[i]);
    return out;
  };
  os << "/* The static memory plan: per dp_shard rank the arena bytes (with "
        "nothing\n * shared: "
     << list(memory.unsharedBytes) << "), per parameter the byte offsets of\n"
     << " * its buffers (-1: none); gradients "
     << (memory.keepGrads ? "kept for accumulation" : "live during backward only")
     << ". */\n";
  os << "static const int64_t mfsdp_arena_bytes[" << memory.arenaBytes.size()
     << "] = {" << list(memory.arenaBytes) << "};\n\n";
  os << "static const mfsdp_param_offsets mfsdp_offsets[" << std::max(1, plan.num_params)
     << "] = {\n";
  os << "  /* master, exp_avg, exp_avg_sq, grad_shard, full, full_backward, grad */\n";
  for (const mfsdp_param_offsets &o : memory.params)
    os << "  {" << o.master << ", " << o.exp_avg << ", " << o.exp_avg_sq << ", "
       << o.grad_shard << ", " << o.full << ", " << o.full_backward << ", "
       << o.grad << "},\n";
  if (memory.params.empty())
    os << "  {-1, -1, -1, -1, -1, -1, -1},\n";
  os << "};\n\n";
  if (!buckets.empty()) {
    os << "/* The bucketed collectives (mfsdp-bucket-collectives): per bucket its unit,\n"
          " * placement and members (indices in mfsdp_params), gathered and reduced\n"
          " * with one collective each; and the byte offsets of each bucket's staging\n"
          " * buffers (gather, backward gather, reduce; -1: none). */\n";
    size_t total = 0;
    for (const step::RuntimeBucket &b : buckets)
      total += b.params.size();
    os << "static const int32_t mfsdp_bucket_members[" << total << "] = {";
    size_t k = 0;
    for (const step::RuntimeBucket &b : buckets)
      for (int32_t p : b.params)
        os << (k++ ? ", " : "") << p;
    os << "};\n\n";
    os << "static const mfsdp_bucket mfsdp_buckets[" << buckets.size() << "] = {\n"
       << "  /* unit, placement, members */\n";
    k = 0;
    for (const step::RuntimeBucket &b : buckets) {
      os << "  {" << b.unit << ", " << placementName(b.placement) << ", "
         << b.params.size() << ", mfsdp_bucket_members + " << k << "}, /*";
      for (int32_t p : b.params)
        os << " " << commentText(descs[p].name);
      os << " */\n";
      k += b.params.size();
    }
    os << "};\n\n";
    os << "static const mfsdp_bucket_offsets mfsdp_bucket_staging[" << buckets.size()
       << "] = {\n";
    for (const mfsdp_bucket_offsets &o : memory.buckets)
      os << "  {" << o.gather << ", " << o.gather_backward << ", " << o.reduce << "},\n";
    os << "};\n\n";
  }
  if (!rowBuckets.empty()) {
    // The row-shard buckets' pack and unpack, specialised with their
    // constants: C for the host backend, and with --cuda the launchers of
    // the CUDA kernels (the .cu source) for the CUDA backend.
    for (const RowBucketLayout &b : rowBuckets)
      emitHostKernels(os, b);
    auto table = [&](const char *name, const char *prefix) {
      os << "static const mfsdp_bucket_kernels " << name << "[" << buckets.size()
         << "] = {\n  /* unpack, pack (owner buckets gather in place) */\n";
      size_t next = 0;
      for (size_t b = 0; b < buckets.size(); ++b) {
        if (next < rowBuckets.size() && rowBuckets[next].index == b) {
          os << "  {" << prefix << "unpack_" << b << ", " << prefix << "pack_" << b
             << "},\n";
          ++next;
        } else {
          os << "  {0, 0},\n";
        }
      }
      os << "};\n\n";
    };
    table("mfsdp_host_kernels", "mfsdp_");
    if (cudaKernels) {
      os << "/* The CUDA kernels' launchers (the library's .cu source). */\n";
      for (const RowBucketLayout &b : rowBuckets)
        os << "__attribute__((visibility(\"hidden\"))) int mfsdp_cuda_unpack_" << b.index
           << "(const float *staging, float *const *full, void *stream);\n"
           << "__attribute__((visibility(\"hidden\"))) int mfsdp_cuda_pack_" << b.index
           << "(const float *const *grad, float *staging, void *stream);\n";
      os << "\n";
      table("mfsdp_cuda_kernels", "mfsdp_cuda_");
    }
  }
  if (cuda) {
    *cuda << "// The CUDA kernels of the step library of plan.graph @"
          << commentText(graph.getSymName()) << ", generated by mfsdp.\n"
          << "// Each row-shard bucket's pack and unpack, specialised with its\n"
          << "// constants; built with nvcc (sm_80, sm_90) into the library.\n"
          << "#include <cuda_runtime.h>\n#include <cstdint>\n\n";
    if (rowBuckets.empty())
      *cuda << "// The plan has no row-shard buckets: no kernels.\n";
    else
      *cuda << "namespace {\n\n";
    // The kernels in the anonymous namespace; the launchers after it.
    for (const RowBucketLayout &b : rowBuckets)
      emitCudaKernels(*cuda, b, /*launchers=*/false);
    if (!rowBuckets.empty())
      *cuda << "} // namespace\n\n";
    for (const RowBucketLayout &b : rowBuckets)
      emitCudaKernels(*cuda, b, /*launchers=*/true);
  }
  if (withProgram) {
    static const char *kinds[] = {
        "MFSDP_PROGRAM_WAIT_REDUCTION", "MFSDP_PROGRAM_OPTIMIZER",
        "MFSDP_PROGRAM_BROADCAST_UPDATES", "MFSDP_PROGRAM_GATHER",
        "MFSDP_PROGRAM_START_GATHER", "MFSDP_PROGRAM_WAIT_GATHER",
        "MFSDP_PROGRAM_RELEASE", "MFSDP_PROGRAM_PLACE_GRADS",
        "MFSDP_PROGRAM_START_REDUCTION", "MFSDP_PROGRAM_UNPACK", "MFSDP_PROGRAM_PACK"};
    static const char *hookNames[] = {"MFSDP_HOOK_PRE_FORWARD", "MFSDP_HOOK_POST_FORWARD",
                                      "MFSDP_HOOK_PRE_BACKWARD", "MFSDP_HOOK_POST_BACKWARD",
                                      "MFSDP_HOOK_OPTIMIZER_STEP"};
    os << "/* The step as the schedule orders it (mfsdp-schedule-overlap,\n"
          " * mfsdp-plan-memory): per hook, the ops the runtime runs, in this order.\n"
          " * Per op its kind, unit, group, optimizer, only rank and parameters\n"
          " * (indices in mfsdp_params); the sched op it comes from in the comment. */\n";
    size_t total = 0;
    for (const step::ProgramOp &op : program.ops)
      total += op.params.size();
    if (total) {
      os << "static const int32_t mfsdp_program_params[" << total << "] = {";
      size_t k = 0;
      for (const step::ProgramOp &op : program.ops)
        for (int32_t p : op.params)
          os << (k++ ? ", " : "") << p;
      os << "};\n\n";
    }
    os << "static const mfsdp_program_op mfsdp_program_ops[" << std::max<size_t>(1, program.ops.size())
       << "] = {\n";
    std::vector<const mfsdp_program_hook *> hookAt(program.ops.size(), nullptr);
    for (const mfsdp_program_hook &h : program.hooks)
      if (h.num_ops > 0)
        hookAt[h.first_op] = &h;
    size_t k = 0;
    for (auto [i, op] : llvm::enumerate(program.ops)) {
      if (const mfsdp_program_hook *h = hookAt[i])
        os << "  /* " << hookNames[h->hook]
           << (h->unit >= 0 ? "(" + std::to_string(h->unit) + ")" : std::string()) << " */\n";
      os << "  {" << kinds[op.kind] << ", " << op.unit << ", " << op.group << ", "
         << optimizerName(op.optimizer) << ", " << op.onlyRank << ", " << op.params.size()
         << ", ";
      if (op.params.empty())
        os << "0";
      else
        os << "mfsdp_program_params + " << k;
      os << "}, /* " << commentText(op.from.str());
      if (!op.params.empty()) {
        os << ":";
        for (int32_t p : op.params)
          os << " " << commentText(descs[p].name);
      }
      os << " */\n";
      k += op.params.size();
    }
    if (program.ops.empty())
      os << "  {0, 0, 0, 0, 0, 0, 0},\n";
    os << "};\n\n";
    os << "static const mfsdp_program_hook mfsdp_program_hooks[" << program.hooks.size()
       << "] = {\n  /* hook, unit, first op, ops */\n";
    for (const mfsdp_program_hook &h : program.hooks)
      os << "  {" << hookNames[h.hook] << ", " << h.unit << ", " << h.first_op << ", " << h.num_ops << "},\n";
    os << "};\n\n";
    os << "static const mfsdp_program mfsdp_the_program = {" << program.ops.size()
       << ", mfsdp_program_ops, " << program.hooks.size() << ", mfsdp_program_hooks};\n\n";
  }
  os << "static const mfsdp_memory_plan mfsdp_the_memory = {\n"
     << "  .num_shard_ranks = " << plan.dp_shard << ",\n"
     << "  .arena_bytes = mfsdp_arena_bytes,\n"
     << "  .params = mfsdp_offsets,\n"
     << "  .staging = " << memory.staging << ",\n"
     << "  .keep_grads = " << memoryPlan.keep_grads << ",\n";
  // Only when set: a library without prefetch reads as before.
  if (memoryPlan.prefetch)
    os << "  .prefetch = " << memoryPlan.prefetch << ",\n";
  if (!buckets.empty())
    os << "  .buckets = mfsdp_bucket_staging,\n";
  os << "};\n\n";
  // The layout of the header the library is compiled with (runtime.h,
  // "Versions"); the runtime refuses a plan of another. Not in the hash.
  os << "static const mfsdp_plan mfsdp_the_plan = {\n"
     << "  .struct_size = sizeof(mfsdp_plan),\n"
     << "  .version = MFSDP_PLAN_VERSION,\n"
     << "  .hash = UINT64_C(" << llvm::format_hex(plan.hash, 18) << "),\n"
     << "  .zero = " << plan.zero << ",\n"
     << "  .dp_replicate = " << plan.dp_replicate << ",\n"
     << "  .dp_shard = " << plan.dp_shard << ",\n"
     << "  .world = " << plan.world << ",\n"
     << "  .num_units = " << plan.num_units << ",\n"
     << "  .num_params = " << plan.num_params << ",\n"
     << "  .params = mfsdp_params,\n"
     << "  .adamw_lr = " << cFloat(plan.adamw_lr) << ",\n"
     << "  .adamw_beta1 = " << cFloat(plan.adamw_beta1) << ",\n"
     << "  .adamw_beta2 = " << cFloat(plan.adamw_beta2) << ",\n"
     << "  .adamw_eps = " << cFloat(plan.adamw_eps) << ",\n"
     << "  .adamw_weight_decay = " << cFloat(plan.adamw_weight_decay) << ",\n"
     << "  .sgd_lr = " << cFloat(plan.sgd_lr) << ",\n"
     << "  .sgd_momentum = " << cFloat(plan.sgd_momentum) << ",\n"
     << "  .sgd_weight_decay = " << cFloat(plan.sgd_weight_decay) << ",\n"
     << "  .sgd_nesterov = " << plan.sgd_nesterov << ",\n"
     << "  .muon_lr = " << cFloat(plan.muon_lr) << ",\n"
     << "  .muon_momentum = " << cFloat(plan.muon_momentum) << ",\n"
     << "  .muon_weight_decay = " << cFloat(plan.muon_weight_decay) << ",\n"
     << "  .muon_nesterov = " << plan.muon_nesterov << ",\n"
     << "  .muon_ns_steps = " << plan.muon_ns_steps << ",\n"
     << "  .muon_scale = " << plan.muon_scale << ",\n"
     << "  .ns_split = " << plan.ns_split << ",\n"
     << "  .memory = &mfsdp_the_memory,\n"
     << "  .num_mesh_dims = " << plan.num_mesh_dims << ",\n"
     << "  .mesh_dims = " << (meshDims.empty() ? "0" : "mfsdp_mesh") << ",\n";
  if (!buckets.empty())
    os << "  .num_buckets = " << buckets.size() << ",\n"
       << "  .buckets = mfsdp_buckets,\n";
  if (!rowBuckets.empty())
    os << "  .host_kernels = mfsdp_host_kernels,\n";
  if (cudaKernels)
    os << "  .cuda_kernels = mfsdp_cuda_kernels,\n";
  if (withProgram)
    os << "  .program = &mfsdp_the_program,\n";
  // Only when set: an fp32 library reads as before.
  if (plan.reduce_dtype != MFSDP_REDUCE_F32)
    os << "  .reduce_dtype = "
       << enumCName(static_cast<mfsdp::ReduceDType>(plan.reduce_dtype)) << ",\n";
  if (plan.muon_ns_precision != MFSDP_NS_PRECISION_FP32)
    os << "  .muon_ns_precision = "
       << enumCName(static_cast<mfsdp::NsPrecision>(plan.muon_ns_precision)) << ",\n";
  os << "};\n\n";
  os << "const mfsdp_plan *mfsdp_step_plan(void) { return &mfsdp_the_plan; }\n\n"
     << "mfsdp_status mfsdp_step_create(mfsdp_step **out) {\n"
     << "  return mfsdp_create(&mfsdp_the_plan, out);\n"
     << "}\n";
  return success();
}

void mfsdp::registerEmitTranslations() {
  static llvm::cl::opt<bool> accumulate(
      "emit-step-accumulate",
      llvm::cl::desc("--emit-step-c: keep gradients between microbatches "
                     "(no-sync accumulation) in the memory plan"),
      llvm::cl::init(false));
  static llvm::cl::opt<int> prefetch(
      "emit-step-prefetch",
      llvm::cl::desc("--emit-step-c: gather prefetch depth (0 or 1): under "
                     "ZeRO-3 the runtime gathers the next unit while the "
                     "trainer computes the current one (two units' copies "
                     "in the memory plan)"),
      llvm::cl::init(0));
  static llvm::cl::opt<double> bucketMB(
      "emit-step-bucket-mb",
      llvm::cl::desc("--emit-step-c: the runtime's buckets hold at most this many "
                     "MiB of flat buffer each (0: no limit); a larger tensor is "
                     "left alone. Default: the limit the sched.step was bucketed "
                     "with (bucket_bytes), which a given value must equal; 25 "
                     "for a step without one"),
      llvm::cl::init(25));
  static llvm::cl::opt<std::string> reduceDtype(
      "emit-step-reduce-dtype",
      llvm::cl::desc("--emit-step-c: the dtype the library reduces gradients in "
                     "(f32 or bf16). Default: the one the sched.step counts its "
                     "reductions in, which a given value must equal"),
      llvm::cl::init(""));
  static TranslateRegistration emitReg(
      "emit-step-c",
      "Emit the C source of the step library of a planned plan.graph",
      [](const std::shared_ptr<llvm::SourceMgr> &sourceMgr, raw_ostream &os,
         MLIRContext *ctx) -> LogicalResult {
        // An option's value is checked before the input is read: its error
        // is the command line's, not a place in the input.
        if (!(bucketMB >= 0) || !std::isfinite(bucketMB)) {
          llvm::errs() << "error: --emit-step-bucket-mb must be a finite number "
                          "of MiB, 0 or more, got "
                       << bucketMB.getValue() << "\n";
          return failure();
        }
        std::optional<ReduceDType> reduce;
        if (reduceDtype.getNumOccurrences()) {
          reduce = parseEnum<ReduceDType>(reduceDtype.getValue());
          if (!reduce) {
            llvm::errs() << "error: --emit-step-reduce-dtype must be "
                         << enumSpellings<ReduceDType>() << ", got '"
                         << reduceDtype.getValue() << "'\n";
            return failure();
          }
        }
        ctx->loadDialect<PlanDialect, sched::SchedDialect>();
        OwningOpRef<ModuleOp> module = parseModule(sourceMgr, ctx);
        if (!module)
          return failure();
        EmitStepOptions options;
        options.accumulate = accumulate;
        options.prefetch = prefetch;
        options.reduceDtype = reduce;
        // Unless given, the limit the step was bucketed with.
        if (bucketMB.getNumOccurrences())
          options.bucketBytes = bucketMB.getValue() * (1 << 20);
        return emitStepLibrarySource(*module, os, options);
      });
}
