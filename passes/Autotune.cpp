//===- Autotune.cpp - Choosing schedule options with the cost model -------===//
#include "passes/Autotune.h"

#include "dialects/plan/PlanOps.h"
#include "dialects/sched/SchedOps.h"
#include "dialects/sched/StepBridge.h"
#include "passes/Pipeline.h"
#include "passes/ScheduleStages.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringExtras.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <utility>

using namespace mlir;

namespace mfsdp {

std::string AutotuneCandidate::options() const {
  return fmt::format("mesh={} bucket-mb={} prefetch={}", mesh, bucketMB, prefetch);
}

namespace {

using Dims = std::vector<std::pair<std::string, int64_t>>;

/// "a=1,b=2" as dims; false if malformed.
bool parseMesh(llvm::StringRef spec, Dims &dims) {
  llvm::SmallVector<llvm::StringRef> items;
  spec.split(items, ',', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef item : items) {
    auto [name, size] = item.trim().split('=');
    int64_t n = 0;
    if (name.trim().empty() || size.trim().getAsInteger(10, n) || n < 1)
      return false;
    dims.push_back({name.trim().str(), n});
  }
  return !dims.empty();
}

std::string meshText(const Dims &dims) {
  std::string out;
  for (const auto &[name, size] : dims)
    out += (out.empty() ? "" : ",") + name + "=" + std::to_string(size);
  return out;
}

/// The mesh with its data-parallel ranks split as `replicas` x the rest:
/// dp_replicate first (added before dp_shard when absent, dropped at 1),
/// every other dim where it was.
std::string withSplit(const Dims &dims, int64_t world, int64_t replicas) {
  Dims out;
  for (const auto &d : dims) {
    if (d.first == "dp_replicate")
      continue;
    if (d.first == "dp_shard") {
      if (replicas > 1)
        out.push_back({"dp_replicate", replicas});
      out.push_back({"dp_shard", world / replicas});
    } else {
      out.push_back(d);
    }
  }
  return meshText(out);
}

/// Runs the default pipeline with `options` on a copy of `module` and
/// simulates its steps; the worst step's figures when there are several.
void evaluate(ModuleOp module, const std::string &options,
              const cost::SimProfile &profile, double capBytes,
              AutotuneCandidate &c) {
  MLIRContext *ctx = module.getContext();
  std::string firstError;
  // A candidate that fails (a cap it exceeds, a split the plan refuses) is
  // recorded, not reported: the search goes on.
  ScopedDiagnosticHandler quiet(ctx, [&](Diagnostic &d) {
    if (d.getSeverity() == DiagnosticSeverity::Error && firstError.empty())
      firstError = d.str();
    return success();
  });
  auto opts = PipelineOptions::createFromString(options);
  if (!opts) {
    c.error = "bad pipeline options: " + options;
    return;
  }
  OwningOpRef<ModuleOp> work = module.clone();
  PassManager pm(ctx);
  buildDefaultPipeline(pm, *opts);
  if (failed(pm.run(*work))) {
    c.error = firstError.empty() ? "the pipeline failed" : firstError;
    return;
  }
  bool any = false;
  for (sched::StepOp op : work->getOps<sched::StepOp>()) {
    step::Step s;
    if (failed(readStep(op, s))) {
      c.error = firstError.empty() ? "cannot read the step" : firstError;
      return;
    }
    cost::SimOptions so;
    so.timings = false;
    cost::SimResult r = cost::simulate(s, stepProfile(op, profile), so);
    if (!r.ok) {
      c.error = "cannot simulate: " + r.error;
      return;
    }
    any = true;
    c.stepSeconds = std::max(c.stepSeconds, r.stepSeconds);
    c.steadySeconds = std::max(c.steadySeconds, r.steadyStepSeconds);
    c.peakBytes = std::max(c.peakBytes, r.peakBytes);
  }
  if (!any) {
    c.error = "the pipeline built no step";
    return;
  }
  c.ok = true;
  c.fits = c.peakBytes <= capBytes;
}

} // namespace

AutotuneResult autotune(ModuleOp module, const std::string &pipeline,
                        const cost::SimProfile &profile, double capBytes,
                        std::vector<double> buckets) {
  AutotuneResult result;
  result.capBytes = capBytes > 0 ? capBytes : profile.hbmCapacityBytes;
  auto base = PipelineOptions::createFromString(pipeline);
  if (!base) {
    result.error = "bad pipeline options '" + pipeline + "'";
    return result;
  }
  // The mesh: the option's, else the graph's.
  Dims dims;
  std::string meshSpec = base->mesh.getValue();
  if (meshSpec.empty()) {
    for (plan::GraphOp g : module.getOps<plan::GraphOp>())
      if (plan::MeshOp m = g.getMesh()) {
        for (auto [n, s] : llvm::zip(m.getDimNames(), m.getDimSizes()))
          dims.push_back({cast<StringAttr>(n).getValue().str(), s});
        break;
      }
    if (dims.empty()) {
      result.error = "no mesh to tune: give mesh= or a graph with a plan.mesh";
      return result;
    }
    meshSpec = meshText(dims);
  } else if (!parseMesh(meshSpec, dims)) {
    result.error = "mesh option '" + meshSpec + "' is not NAME=SIZE,...";
    return result;
  }
  int64_t world = 1;
  bool hasShard = false;
  for (const auto &[name, size] : dims) {
    if (name == "dp_shard" || name == "dp_replicate")
      world *= size;
    hasShard |= name == "dp_shard";
  }
  if (!hasShard) {
    result.error = "mesh '" + meshSpec + "' has no dp_shard dim";
    return result;
  }

  auto run = [&](const std::string &mesh, double bucketMB, int64_t prefetch) {
    for (const AutotuneCandidate &c : result.tried)
      if (c.mesh == mesh && c.bucketMB == bucketMB && c.prefetch == prefetch)
        return;
    AutotuneCandidate c;
    c.mesh = mesh;
    c.bucketMB = bucketMB;
    c.prefetch = prefetch;
    evaluate(module, pipeline + " " + c.options(), profile, result.capBytes, c);
    result.tried.push_back(std::move(c));
  };
  auto bestOf = [&](size_t from) -> int64_t {
    int64_t best = -1;
    for (size_t i = from; i < result.tried.size(); ++i) {
      const AutotuneCandidate &c = result.tried[i];
      if (c.ok && c.fits &&
          (best < 0 || c.steadySeconds < result.tried[best].steadySeconds))
        best = static_cast<int64_t>(i);
    }
    return best;
  };

  const double bucket0 = base->bucketMB;
  const int64_t prefetch0 = base->prefetch;
  // The defaults first, then every split of the data-parallel ranks.
  run(meshSpec, bucket0, prefetch0);
  for (int64_t replicas = 1; replicas <= world; ++replicas)
    if (world % replicas == 0)
      run(withSplit(dims, world, replicas), bucket0, prefetch0);
  int64_t splitBest = bestOf(0);
  const std::string mesh =
      splitBest >= 0 ? result.tried[splitBest].mesh : meshSpec;
  // Then bucket size x prefetch depth on that split.
  std::vector<int64_t> depths{0, 1, 2};
  if (!llvm::is_contained(buckets, bucket0))
    buckets.push_back(bucket0);
  if (!llvm::is_contained(depths, prefetch0))
    depths.push_back(prefetch0);
  for (double b : buckets)
    for (int64_t d : depths)
      run(mesh, b, d);
  result.best = bestOf(0);
  return result;
}

std::string renderAutotune(const AutotuneResult &r) {
  if (!r.error.empty())
    return "autotune: " + r.error + "\n";
  constexpr double GiB = 1024.0 * 1024.0 * 1024.0;
  std::string out = fmt::format(
      "autotune: {} candidates, every time predicted by the cost model (not "
      "measured); peak memory capped at {:.2f} GiB per rank\n",
      r.tried.size(), r.capBytes / GiB);
  out += fmt::format("  {:<36} {:>9} {:>8} {:>12} {:>12} {:>9}\n", "mesh",
                     "bucket-mb", "prefetch", "step ms", "steady ms", "peak GiB");
  for (size_t i = 0; i < r.tried.size(); ++i) {
    const AutotuneCandidate &c = r.tried[i];
    std::string mark = static_cast<int64_t>(i) == r.best ? "  <- best" : "";
    if (i == 0)
      mark += "  (defaults)";
    if (!c.ok) {
      out += fmt::format("  {:<36} {:>9} {:>8}   not planned: {}{}\n", c.mesh,
                         c.bucketMB, c.prefetch, c.error, mark);
      continue;
    }
    out += fmt::format("  {:<36} {:>9} {:>8} {:>12.3f} {:>12.3f} {:>9.2f}{}{}\n",
                       c.mesh, c.bucketMB, c.prefetch, c.stepSeconds * 1e3,
                       c.steadySeconds * 1e3, c.peakBytes / GiB,
                       c.fits ? "" : "  over the cap", mark);
  }
  if (r.best < 0) {
    out += "  no candidate fits the memory cap\n";
    return out;
  }
  const AutotuneCandidate &best = r.tried[r.best];
  const AutotuneCandidate &def = r.tried.front();
  if (def.ok && def.fits)
    out += fmt::format("predicted gain of the best over the defaults: {:.3f}x "
                       "(steady step {:.3f} -> {:.3f} ms): {}\n",
                       def.steadySeconds / best.steadySeconds,
                       def.steadySeconds * 1e3, best.steadySeconds * 1e3,
                       best.options());
  else
    out += fmt::format("the defaults do not {}; predicted best: {} (steady step "
                       "{:.3f} ms)\n",
                       def.ok ? "fit the memory cap" : "plan", best.options(),
                       best.steadySeconds * 1e3);
  return out;
}

} // namespace mfsdp
