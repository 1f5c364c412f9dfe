//===- RuntimePlan.cpp - A planned plan.graph as the runtime's mfsdp_plan -===//
//
// The constants of a step library (every parameter's shape, unit,
// placement, owner rank and optimizer; the mesh; the ZeRO level; the
// optimizer hyperparameters) built from the planned IR, once, for the
// emitter (EmitStep.cpp) and for mfsdp-verify-schedule, which lowers the
// scheduled step to the program the library would carry and checks it;
// and the whole of what a library states (buildLibraryPlan: buckets,
// program, memory plan, hash), for the emitter and mfsdp-sim.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/emit/RuntimePlan.h"

#include "llvm/Support/StringSaver.h"

#include "dialects/sched/StepBridge.h"
#include "mfsdp/import/PlanImport.h"
#include "mfsdp/runtime/PlanHash.h"
#include "mfsdp/step/Schedule.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"

#include "llvm/ADT/DenseMap.h"

using namespace mlir;
using namespace mfsdp;
using namespace mfsdp::plan;

namespace {

/// The optimizer hyperparameters the runtime takes once per plan; every
/// parameter with that optimizer must agree with the first one seen.
template <typename Attr> struct OneSetting {
  Attr first;
  ParamOp firstParam;

  LogicalResult add(Attr a, ParamOp p, StringRef what) {
    if (!first) {
      first = a;
      firstParam = p;
      return success();
    }
    if (a == first)
      return success();
    return p.emitOpError() << "has " << what << " hyperparameters " << a
                           << " but @" << firstParam.getSymName() << " has "
                           << first
                           << "; the step runtime takes one setting per "
                              "optimizer";
  }
};

} // namespace

LogicalResult mfsdp::buildRuntimePlan(GraphOp graph, RuntimePlan &out) {
  MeshOp mesh = graph.getMesh();
  PolicyOp policy = graph.getPolicy();
  if (!mesh || !policy)
    return graph.emitOpError()
           << "has no " << (mesh ? "plan.policy" : "plan.mesh")
           << "; run --mfsdp-assign-layouts before emitting a step library";
  if (policy.getNoMaster())
    return policy.emitOpError()
           << "has no fp32 master weights (no_master); the step runtime keeps "
              "fp32 masters";

  mfsdp_plan &plan = out.plan;
  out.mesh = mesh;
  out.policy = policy;
  plan.zero = static_cast<int32_t>(policy.getZero());
  plan.dp_shard = static_cast<int32_t>(mesh.getDimSize("dp_shard").value_or(1));
  plan.dp_replicate =
      static_cast<int32_t>(mesh.getDimSize("dp_replicate").value_or(1));
  // The whole mesh, in order: outer dims (tp, ep, ...) in any position;
  // the runtime forms its data-parallel groups by this layout.
  std::deque<std::string> &meshNames = out.meshNames;
  std::vector<mfsdp_mesh_dim> &meshDims = out.meshDims;
  for (auto [n, s] : llvm::zip(mesh.getDimNames(), mesh.getDimSizes())) {
    meshNames.push_back(cast<StringAttr>(n).getValue().str());
    meshDims.push_back({meshNames.back().c_str(), static_cast<int32_t>(s)});
  }
  plan.world = static_cast<int32_t>(mesh.getWorldSize());
  plan.num_mesh_dims = static_cast<int32_t>(meshDims.size());
  plan.mesh_dims = meshDims.empty() ? nullptr : meshDims.data();

  // Units in index order; each parameter's unit.
  Block &body = graph.getBody().front();
  std::vector<UnitOp> &units = out.units;
  for (UnitOp u : body.getOps<UnitOp>())
    units.push_back(u);
  llvm::stable_sort(units, [](UnitOp a, UnitOp b) {
    return static_cast<int64_t>(a.getIndex()) <
           static_cast<int64_t>(b.getIndex());
  });
  // Keyed by the names' uniqued StringAttrs (a reference's and the
  // parameter's own are one attribute): no name is hashed.
  llvm::DenseMap<StringAttr, int32_t> unitOf;
  for (auto [i, u] : llvm::enumerate(units)) {
    // The runtime stages row shards per parameter and copies them in and
    // out (FSDP2's layout); a flat unit's step prices no copies and pads
    // otherwise, so the library would not run what the step says.
    if (auto l = u.getRowLayout(); l && *l == plan::RowLayout::flat)
      return u.emitOpError()
             << "has row_layout flat: the step runtime gathers and reduces row "
                "shards per parameter, copying them in and out of its buckets "
                "(FSDP2's layout), and does not use a flat buffer in place; "
                "plan with row-layout=per_param (the default) for a step library";
    for (Attribute a : u.getParams())
      unitOf[cast<FlatSymbolRefAttr>(a).getAttr()] = static_cast<int32_t>(i);
  }
  plan.num_units = static_cast<int32_t>(units.size());

  llvm::StringSaver names(out.nameStorage);
  std::vector<mfsdp_param_desc> &descs = out.descs;
  descs.reserve(static_cast<size_t>(llvm::range_size(body.getOps<ParamOp>())));
  OneSetting<AdamWAttr> adamw;
  OneSetting<SGDAttr> sgd;
  OneSetting<MuonAttr> muon;
  // Parameters the outer stack keeps (#plan.external): not in the table.
  int64_t &numExternal = out.numExternal;
  std::vector<std::string> &externalDims = out.externalDims;
  for (ParamOp p : body.getOps<ParamOp>()) {
    if (p.getTiedTo())
      continue; // an alias: no storage of its own
    Attribute pl = p.getPlacementAttr();
    if (auto ext = dyn_cast_or_null<ExternalAttr>(pl)) {
      ++numExternal;
      for (Attribute a : ext.getAxes()) {
        std::string dim = cast<StringAttr>(a).getValue().str();
        if (!llvm::is_contained(externalDims, dim))
          externalDims.push_back(dim);
      }
      continue;
    }
    if (!pl)
      return p.emitOpError()
             << "has no placement; run --mfsdp-assign-layouts before emitting "
                "a step library";
    mfsdp_param_desc d{};
    if (auto row = dyn_cast<RowShardAttr>(pl)) {
      if (row.getDim() != 0)
        return p.emitOpError() << "is row-sharded on dim " << row.getDim()
                               << "; the step runtime shards dim 0";
      d.placement = MFSDP_ROW_SHARD;
    } else if (auto own = dyn_cast<OwnerAttr>(pl)) {
      d.placement = MFSDP_OWNER;
      d.owner = static_cast<int32_t>(own.getRank());
    } else if (isa<ReplicateAttr>(pl)) {
      d.placement = MFSDP_REPLICATE;
    } else if (auto block = dyn_cast<BlockShardAttr>(pl)) {
      // Blocks over dp_shard; dims after the first flatten into columns,
      // so a block must span each of them whole.
      ArrayAttr axes = block.getAxes();
      if (axes.size() != 1 || cast<StringAttr>(axes[0]).getValue() != "dp_shard")
        return p.emitOpError()
               << "is block-sharded over " << axes
               << "; the step runtime deals blocks over [\"dp_shard\"] only";
      ArrayRef<int64_t> extents = block.getBlock();
      ArrayRef<int64_t> dims = p.getTensorType().getShape();
      for (size_t i = 2; i < extents.size() && i < dims.size(); ++i)
        if (extents[i] != dims[i])
          return p.emitOpError()
                 << "has blocks of extent " << extents[i] << " in dim " << i
                 << " of size " << dims[i]
                 << "; the step runtime flattens dims after the second into "
                    "columns, so blocks must span them whole";
      d.placement = MFSDP_BLOCK_SHARD;
      d.block_rows = extents.empty() ? 1 : extents[0];
      d.block_cols = 1;
      for (size_t i = 1; i < extents.size(); ++i)
        d.block_cols *= extents[i];
    } else {
      return p.emitOpError() << "has placement " << pl
                             << "; the step runtime runs row_shard, block_shard, "
                                "owner and replicate placements";
    }
    RankedTensorType t = p.getTensorType();
    Type elem = t.getElementType();
    if (elem.isBF16())
      d.compute_dtype = MFSDP_COMPUTE_BF16;
    else if (elem.isF32())
      d.compute_dtype = MFSDP_COMPUTE_F32;
    else
      return p.emitOpError() << "computes in " << elem
                             << "; the step runtime computes in f32 or bf16";
    ArrayRef<int64_t> shape = t.getShape();
    d.rows = shape.empty() ? 1 : shape[0];
    d.cols = 1;
    for (int64_t s : shape.drop_front())
      d.cols *= s;
    auto it = unitOf.find(p.getSymNameAttr());
    if (it == unitOf.end())
      return p.emitOpError() << "is in no plan.unit";
    d.unit = it->second;
    Attribute opt = p.getOptimizerAttr();
    if (p.getFrozen() || !opt) {
      d.optimizer = MFSDP_OPT_NONE;
    } else if (auto a = dyn_cast<AdamWAttr>(opt)) {
      d.optimizer = MFSDP_OPT_ADAMW;
      if (failed(adamw.add(a, p, "AdamW")))
        return failure();
    } else if (auto s = dyn_cast<SGDAttr>(opt)) {
      d.optimizer = MFSDP_OPT_SGD;
      if (failed(sgd.add(s, p, "SGD")))
        return failure();
    } else if (auto m = dyn_cast<MuonAttr>(opt)) {
      if (d.placement == MFSDP_ROW_SHARD || d.placement == MFSDP_BLOCK_SHARD)
        return p.emitOpError()
               << "uses Muon on a "
               << (d.placement == MFSDP_ROW_SHARD ? "row shard" : "block shard")
               << "; Muon needs the whole matrix (an owner or replicate "
                  "placement); the step runtime runs block shards with "
                  "elementwise optimizers (AdamW, SGD) only";
      d.optimizer = MFSDP_OPT_MUON;
      if (failed(muon.add(m, p, "Muon")))
        return failure();
    }
    d.name = names.save(p.getSymName()).data(); // (saved with a terminating NUL)
    descs.push_back(d);
  }
  plan.num_params = static_cast<int32_t>(descs.size());
  plan.params = descs.data();

  // Hyperparameters: the parameters' own, else the policy's (kept so the
  // library states them even when no parameter uses that optimizer).
  AdamWAttr aw = adamw.first ? adamw.first : policy.getAdamwAttr();
  SGDAttr sg = sgd.first ? sgd.first : policy.getSgdAttr();
  MuonAttr mu = muon.first ? muon.first : policy.getMuonAttr();
  if (aw) {
    plan.adamw_lr = static_cast<float>(aw.getLr());
    plan.adamw_beta1 = static_cast<float>(aw.getBeta1());
    plan.adamw_beta2 = static_cast<float>(aw.getBeta2());
    plan.adamw_eps = static_cast<float>(aw.getEps());
    plan.adamw_weight_decay = static_cast<float>(aw.getWeightDecay());
  }
  if (sg) {
    plan.sgd_lr = static_cast<float>(sg.getLr());
    plan.sgd_momentum = static_cast<float>(sg.getMomentum());
    plan.sgd_weight_decay = static_cast<float>(sg.getWeightDecay());
    plan.sgd_nesterov = sg.getNesterov() ? 1 : 0;
  }
  if (mu) {
    plan.muon_lr = static_cast<float>(mu.getLr());
    plan.muon_momentum = static_cast<float>(mu.getMomentum());
    plan.muon_weight_decay = static_cast<float>(mu.getWeightDecay());
    plan.muon_nesterov = mu.getNesterov() ? 1 : 0;
    plan.muon_ns_steps = static_cast<int32_t>(mu.getNsSteps());
    plan.muon_scale = mu.getScale() == plan::MuonScale::original ? 1 : 0;
    plan.muon_ns_precision = static_cast<int32_t>(plan::toVocab(mu.getNsPrecision()));
  }
  // HSDP Newton-Schulz split: the runtime derives which replica steps each
  // owned Muon matrix with the rule of plan.policy (runtime.h: ns_split).
  plan.ns_split = policy.getNsSplit() ? 1 : 0;
  for (UnitOp u : units)
    out.unitNames.push_back(u.getSymName().str());
  return success();
}

FailureOr<double> mfsdp::libraryBucketBytes(sched::StepOp step,
                                            std::optional<double> requested) {
  constexpr double kDefault = 25.0 * (1 << 20);
  std::optional<int64_t> bucketed;
  if (step)
    bucketed = step.getBucketBytes();
  if (!bucketed)
    return requested.value_or(kDefault);
  const double limit = static_cast<double>(*bucketed);
  // The request in whole bytes, as mfsdp-bucket-collectives records its limit.
  const int64_t asked = requested ? step::bucketLimitBytes(*requested) : 0;
  if (requested && asked != *bucketed)
    return step.emitOpError()
           << "was bucketed with bucket_bytes " << *bucketed << " (0: no limit), but the "
           << "step library was asked for runtime buckets of at most " << asked
           << " bytes: the library's buckets are the step's (rebuild the step "
              "with that bucket size, or leave the library's out)";
  return limit;
}

void mfsdp::setLibraryBuckets(RuntimePlan &rp, const step::Step &s, double limitBytes) {
  rp.buckets = step::runtimeBuckets(s, rp.plan, limitBytes);
  rp.bucketViews = step::bucketViews(rp.buckets);
  rp.plan.num_buckets = static_cast<int32_t>(rp.bucketViews.size());
  rp.plan.buckets = rp.bucketViews.empty() ? nullptr : rp.bucketViews.data();
}

FailureOr<ReduceDType> mfsdp::libraryReduceDtype(sched::StepOp step,
                                                 const std::vector<mfsdp_param_desc> &descs,
                                                 std::optional<ReduceDType> requested) {
  if (!step)
    return requested.value_or(ReduceDType::F32);
  ReduceDType counted = ReduceDType::F32;
  std::string why;
  if (std::optional<sched::ReduceDType> d = step.getReduceDtype()) {
    counted = sched::toVocab(*d);
    why = "reduce_dtype " + std::string(enumName(counted));
  } else {
    // Each parameter's own dtype: one for all, or no single reduce dtype.
    // The first of each dtype (frozen parameters too: the runtime reduces
    // their gradients with the others').
    const mfsdp_param_desc *bf16 = nullptr, *f32 = nullptr;
    for (const mfsdp_param_desc &d : descs) {
      const mfsdp_param_desc *&first = d.compute_dtype == MFSDP_COMPUTE_BF16 ? bf16 : f32;
      if (!first)
        first = &d;
    }
    if (bf16 && f32)
      return step.emitOpError()
             << "counts each parameter's gradient reductions in its own dtype (built "
                "without reduce-dtype f32 or bf16), but '"
             << bf16->name << "' is bf16 and '" << f32->name
             << "' f32, and the step runtime reduces all in one dtype: build the step "
                "with mfsdp-build-step{reduce-dtype=f32} or {reduce-dtype=bf16}";
    counted = bf16 ? ReduceDType::BF16 : ReduceDType::F32;
    why = "each parameter's own dtype, " + std::string(enumName(counted));
  }
  if (requested && *requested != counted)
    return step.emitOpError()
           << "counts its gradient reductions in " << why
           << ", but the step library was asked to reduce in "
           << llvm::StringRef(enumName(*requested))
           << ": the library moves the bytes the step counts (rebuild the step "
              "with mfsdp-build-step{reduce-dtype="
           << llvm::StringRef(enumName(*requested)) << "}, or leave the library's out)";
  return counted;
}

LogicalResult mfsdp::checkLibraryNsPrecision(sched::StepOp step, const mfsdp_plan &plan) {
  if (!step)
    return success();
  const NsPrecision priced = step.getNsPrecision() ? sched::toVocab(*step.getNsPrecision())
                                                   : NsPrecision::FP32;
  const auto runs = static_cast<NsPrecision>(plan.muon_ns_precision);
  const bool muon = llvm::any_of(llvm::ArrayRef(plan.params, plan.num_params),
                                 [](const mfsdp_param_desc &d) {
                                   return d.optimizer == MFSDP_OPT_MUON;
                                 });
  if (!muon || priced == runs)
    return success();
  return step.emitOpError()
         << "was scheduled with Newton-Schulz in " << llvm::StringRef(enumName(priced))
         << " (ns_precision), but its graph's #plan.muon runs it in "
         << llvm::StringRef(enumName(runs))
         << ": the library runs the graph's, so the schedule and its prediction would "
            "not be of what runs (plan the graph with mfsdp-assign-layouts{ns-precision="
         << llvm::StringRef(enumName(priced)) << "} and rebuild the step)";
}

LogicalResult mfsdp::buildLibraryRuntimePlan(GraphOp graph, sched::StepOp step,
                                             const step::Step *s,
                                             std::optional<ReduceDType> reduce,
                                             bool buckets,
                                             std::optional<double> bucketBytes,
                                             RuntimePlan &out) {
  if (failed(buildRuntimePlan(graph, out)))
    return failure();
  mfsdp_plan &plan = out.plan;
  // The dtype of the gradient reductions (runtime.h: reduce_dtype): the
  // step's, so that the library moves the bytes the step counts.
  FailureOr<ReduceDType> reduceDtype = libraryReduceDtype(step, out.descs, reduce);
  if (failed(reduceDtype))
    return failure();
  plan.reduce_dtype = static_cast<int32_t>(*reduceDtype);
  if (failed(checkLibraryNsPrecision(step, plan)))
    return failure();
  // Buckets: the step's bucketed gradient reductions (after
  // mfsdp-build-step and mfsdp-bucket-collectives) within the limit they
  // were bucketed with; the runtime gathers and reduces each with one
  // collective. They come before the program, which packs and unpacks the
  // units that have row-shard buckets. Without buckets, one collective per
  // parameter (mfsdp-compile --bucket-mb=0).
  if (step && s && buckets) {
    FailureOr<double> limit = libraryBucketBytes(step, bucketBytes);
    if (failed(limit))
      return failure();
    setLibraryBuckets(out, *s, *limit);
  }
  return success();
}

std::string mfsdp::lowerLibraryProgram(const step::Step &s, RuntimePlan &rp, bool origins,
                                       step::RuntimeProgram &program,
                                       step::RuntimeProgram::View &view,
                                       bool *unsupported) {
  auto lower = [&](bool withOrigins) {
    return step::lowerStepProgram(s, rp.plan, rp.unitNames, withOrigins);
  };
  program = lower(origins);
  if (unsupported)
    *unsupported = program.unsupported;
  if (!program.error.empty())
    return "cannot be lowered into the runtime's program: " +
           (origins ? program.error : lower(true).error);
  // What the library will run, checked against the step it runs.
  program.view(view);
  const step::ProgramIssue issue =
      step::verifyProgram(s, rp.plan, view.program, rp.unitNames);
  if (!issue.message.empty()) {
    std::string message =
        "lowers to a runtime program that does not run as scheduled: " + issue.message;
    if (issue.op >= 0 && issue.op < static_cast<int32_t>(program.ops.size()))
      message += " (op " + std::to_string(issue.op) + " is lowered from '" +
                 (origins ? program.ops[issue.op].from.str() : lower(true).ops[issue.op].from.str()) +
                 "')";
    return message;
  }
  rp.plan.program = &view.program;
  return {};
}

RecordedLibraryMemory mfsdp::recordedLibraryMemory(sched::StepOp step,
                                                   const mfsdp_plan &plan, bool keepGrads,
                                                   int32_t prefetch) {
  RecordedLibraryMemory out;
  RecordedRuntimeMemory recorded;
  if (std::string why = readRuntimeMemory(step, plan, recorded); !why.empty()) {
    out.ofLibrary = false;
    out.memory.error = std::move(why);
    return out;
  }
  out.keepsGrads = recorded.view.keep_grads != 0;
  out.memory = step::planRuntimeMemory(plan, keepGrads, 256, prefetch, plan.program,
                                       &recorded.view);
  return out;
}

LogicalResult mfsdp::buildLibraryPlan(ModuleOp module, const EmitStepOptions &options,
                                      LibraryPlan &out, const step::Step *given) {
  out.graph = findSingleGraph(module);
  if (!out.graph)
    return failure();
  // The step as the schedule orders it (each unit's forward and backward
  // hooks, and the optimizer step), when the step program is scheduled and
  // its memory planned (mfsdp-schedule-overlap, then mfsdp-plan-memory):
  // the runtime executes it (mfsdp_program).
  sched::StepOp stepOp;
  step::Step read;
  const step::Step &scheduled = given ? *given : read;
  for (sched::StepOp s : module.getOps<sched::StepOp>()) {
    if (stepOp)
      return s.emitOpError() << "is a second sched.step; the step library "
                                "lowers one";
    stepOp = s;
  }
  if (stepOp && !given && failed(readStep(stepOp, read)))
    return failure();
  // The plan's constants, reduce dtype and buckets, as
  // mfsdp-verify-schedule builds them too.
  RuntimePlan &runtimePlan = out.runtime;
  if (failed(buildLibraryRuntimePlan(out.graph, stepOp, stepOp ? &scheduled : nullptr,
                                     options.reduceDtype, options.buckets,
                                     options.bucketBytes, runtimePlan)))
    return failure();
  mfsdp_plan &plan = runtimePlan.plan;
  if (stepOp) {
    out.accumulates = scheduled.microbatches > 1;
    out.withProgram = llvm::any_of(scheduled.buffers, [](const step::Buffer &b) {
      return b.offset >= 0;
    });
  }
  if (out.withProgram) {
    if (std::string issue = lowerLibraryProgram(scheduled, runtimePlan, /*origins=*/true,
                                                out.program, out.programView);
        !issue.empty())
      return stepOp.emitOpError() << issue;
  }
  // The static memory plan: every buffer of the runtime at its offset,
  // where mfsdp-plan-memory placed it (the step records it), checked to fit
  // the buffers and lifetimes of what the library runs.
  const bool keepGrads = options.accumulate || out.accumulates;
  if (stepOp && hasRuntimeMemory(stepOp)) {
    RecordedLibraryMemory recorded =
        recordedLibraryMemory(stepOp, plan, keepGrads, options.prefetch);
    if (!recorded.ofLibrary)
      return stepOp.emitOpError() << "records a runtime memory plan that is not of this "
                                     "library: "
                                  << recorded.memory.error;
    if (!recorded.memory.error.empty())
      return stepOp.emitOpError()
             << "records a runtime memory plan (mfsdp-plan-memory) that does not fit "
                "the library: "
             << recorded.memory.error
             << (keepGrads && !recorded.keepsGrads
                     ? " (mfsdp-plan-memory{accumulate=true} keeps them)"
                     : "");
    out.memory = std::move(recorded.memory);
  } else {
    // A scheduled step's buffers are placed by mfsdp-plan-memory, nowhere
    // else; only a library without a program (the runtime derives it) is
    // planned here, over the derived program's lifetimes.
    if (out.withProgram)
      return stepOp.emitOpError()
             << "is scheduled but records no memory plan of the step library "
                "(runtime_offsets): run mfsdp-plan-memory after scheduling it, which "
                "places the library's buffers over the program it runs";
    out.memory = step::planRuntimeMemory(plan, keepGrads, 256, options.prefetch,
                                         plan.program);
    if (!out.memory.error.empty())
      return out.graph.emitOpError() << "cannot plan the runtime's memory: "
                                     << out.memory.error;
  }
  out.memoryView = out.memory.view();
  plan.memory = &out.memoryView;
  plan.hash = runtime::planHash(plan);
  return success();
}

bool mfsdp::hasRuntimeMemory(sched::StepOp step) {
  return step.getRuntimeArenaBytesAttr() && step.getRuntimeOffsetsAttr() &&
         step.getRuntimeStagingAttr();
}

std::string mfsdp::readRuntimeMemory(sched::StepOp step, const mfsdp_plan &plan,
                                     RecordedRuntimeMemory &out) {
  ArrayRef<int64_t> arena = *step.getRuntimeArenaBytes();
  ArrayRef<int64_t> offsets = *step.getRuntimeOffsets();
  ArrayRef<int64_t> buckets =
      step.getRuntimeBucketOffsets() ? *step.getRuntimeBucketOffsets() : ArrayRef<int64_t>();
  const int64_t params = std::max<int64_t>(plan.num_params, 0);
  const int64_t numBuckets = plan.buckets ? std::max<int64_t>(plan.num_buckets, 0) : 0;
  if (static_cast<int64_t>(offsets.size()) != 7 * params)
    return "runtime_offsets places " + std::to_string(offsets.size() / 7) +
           " parameters; the library's table has " + std::to_string(params);
  if (static_cast<int64_t>(buckets.size()) != 3 * numBuckets)
    return "runtime_bucket_offsets places " + std::to_string(buckets.size() / 3) +
           " buckets; the library has " + std::to_string(numBuckets);
  out.arenaBytes.assign(arena.begin(), arena.end());
  out.params.resize(static_cast<size_t>(params));
  for (int64_t i = 0; i < params; ++i) {
    const int64_t *o = offsets.data() + 7 * i;
    out.params[i] = {o[0], o[1], o[2], o[3], o[4], o[5], o[6]};
  }
  out.buckets.resize(static_cast<size_t>(numBuckets));
  for (int64_t b = 0; b < numBuckets; ++b)
    out.buckets[b] = {buckets[3 * b], buckets[3 * b + 1], buckets[3 * b + 2]};
  out.view = mfsdp_memory_plan{};
  out.view.num_shard_ranks = static_cast<int32_t>(out.arenaBytes.size());
  out.view.arena_bytes = out.arenaBytes.data();
  out.view.params = out.params.data();
  out.view.staging = static_cast<int64_t>(*step.getRuntimeStaging());
  out.view.keep_grads = step.getRuntimeKeepGrads() ? 1 : 0;
  out.view.buckets = out.buckets.empty() ? nullptr : out.buckets.data();
  return {};
}

void mfsdp::recordRuntimeMemory(sched::StepOp step, const step::RuntimeMemoryPlan *memory) {
  if (!memory) {
    step.removeRuntimeArenaBytesAttr();
    step.removeRuntimeStagingAttr();
    step.removeRuntimeKeepGradsAttr();
    step.removeRuntimeOffsetsAttr();
    step.removeRuntimeBucketOffsetsAttr();
    return;
  }
  Builder b(step.getContext());
  std::vector<int64_t> offsets;
  offsets.reserve(7 * memory->params.size());
  for (const mfsdp_param_offsets &o : memory->params)
    offsets.insert(offsets.end(), {o.master, o.exp_avg, o.exp_avg_sq, o.grad_shard, o.full,
                                   o.full_backward, o.grad});
  step.setRuntimeArenaBytesAttr(b.getDenseI64ArrayAttr(memory->arenaBytes));
  step.setRuntimeStagingAttr(b.getI64IntegerAttr(memory->staging));
  step.setRuntimeKeepGrads(memory->keepGrads);
  step.setRuntimeOffsetsAttr(b.getDenseI64ArrayAttr(offsets));
  if (memory->buckets.empty()) {
    step.removeRuntimeBucketOffsetsAttr();
  } else {
    std::vector<int64_t> buckets;
    for (const mfsdp_bucket_offsets &o : memory->buckets)
      buckets.insert(buckets.end(), {o.gather, o.gather_backward, o.reduce});
    step.setRuntimeBucketOffsetsAttr(b.getDenseI64ArrayAttr(buckets));
  }
}
