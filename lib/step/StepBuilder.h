//===- StepBuilder.h - The step builder, shared by its files -----*- C++ -*-===//
//
// Private to lib/step: buildStep's builder. Builder.cpp builds the
// persistent buffers, the forward and the backward of a step;
// BuildOptimizer.cpp its optimizer phase.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_LIB_STEP_STEPBUILDER_H
#define MFSDP_LIB_STEP_STEPBUILDER_H

#include "mfsdp/step/Builder.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace mfsdp::step::detail {

using planner::Optim;
using planner::Param;
using planner::PlacementKind;

/// `list`, or `shared` itself when it holds the same names: the ops that
/// carry the same parameters share one list.
inline NameList sharedIfSame(const NameList &shared, NameList list) {
  return list == shared ? shared : list;
}

struct GroupInfo {
  std::vector<int64_t> units;           // in forward order
  std::vector<const Param *> rows;      // row-sharded (and block-sharded)
  std::vector<const Param *> owned;     // on owners
  std::vector<const Param *> replicated;
  std::vector<const Param *> gatheredMuon; // fsdp2 baseline: Muon on rows
  double rowBytes = 0, rowPad = 0, ownedBytes = 0, replicatedBytes = 0;
  std::vector<double> chunks;           // owned bytes per rank
  NameList rowNames, ownedNames; // shared by the ops that carry them
  /// One unit's share of the group's collectives.
  struct Piece {
    int64_t unit = -1;
    double rowBytes = 0;               // row shards, padded
    double ownedBytes = 0;
    Chunks chunks;                     // owned bytes per rank
    // The same in BuildOptions::reduceElemBytes an element (when set): what
    // the unit's reductions move, whole bytes whatever mix of dtypes.
    double reduceRowBytes = 0, reduceOwnedBytes = 0;
    Chunks reduceChunks;
    // The unit copies its rows into and out of staging (copied, see
    // collectGroups), this many bytes of them.
    bool copied = false;
    double copyBytes = 0;
    NameList rowNames, ownedNames; // shared by the ops that carry them
  };
  std::vector<Piece> pieces;           // one per unit, forward order
  // Buffers (indices into Step::buffers), -1 when the group has none.
  int64_t rowShard = -1, rowGrad = -1, ownedFull = -1, ownedLocal = -1,
          ownedGradFull = -1, replicatedBuf = -1, accum = -1, gathered = -1,
          staging = -1; // the copied units' gathered or reduced rows
  /// Whether any unit of the group copies its rows (staging).
  bool copies() const {
    return std::any_of(pieces.begin(), pieces.end(),
                       [](const Piece &p) { return p.copied; });
  }
  /// The copied units' rows as their collectives move them: the staging's
  /// bytes (in the reduce dtype's with `reduceDtype`). Block shards too,
  /// which the runtime gathers apart from its buckets: that much larger
  /// than the runtime's staging.
  double stagedBytes(bool reduceDtype = false) const {
    double bytes = 0;
    for (const Piece &p : pieces)
      if (p.copied)
        bytes += reduceDtype ? p.reduceRowBytes : p.rowBytes;
    return bytes;
  }
};

class StepBuilder {
public:
  StepBuilder(const planner::Problem &pr, const planner::Options &o,
              const planner::Decisions &d, const std::vector<UnitCost> &u,
              const BuildOptions &b)
      : pr(pr), o(o), d(d), costs(u), b(b), S(std::max<int64_t>(o.shard, 1)) {}

  Step build(const std::string &name) {
    st.name = name;
    st.world = S;
    st.tokens = b.tokens;
    st.microbatches = std::max<int64_t>(b.microbatches, 1);
    collectGroups();
    declarePersistent();
    for (int64_t m = 0; m < st.microbatches; ++m) {
      forward(m);
      backward(m, m + 1 == st.microbatches);
    }
    optimizer();
    return std::move(st);
  }

private:
  /// The step's array holds its ops in chunks: growing it never copies.
  void add(Op &&op) { st.ops.push_back(std::move(op)); }

  int64_t alloc(std::string name, double bytes, bool persistent,
                int64_t onlyRank = -1) {
    Buffer buf;
    buf.name = std::move(name);
    buf.bytes = bytes;
    buf.persistent = persistent;
    buf.onlyRank = onlyRank;
    st.buffers.push_back(buf);
    int64_t id = static_cast<int64_t>(st.buffers.size()) - 1;
    Op op;
    op.kind = OpKind::Alloc;
    op.phase = phase;
    op.name = "alloc " + st.buffers.back().name;
    op.onlyRank = onlyRank;
    op.writes = {id};
    add(std::move(op));
    return id;
  }
  void free(int64_t id) {
    Op op;
    op.kind = OpKind::Free;
    op.phase = phase;
    op.name = "free " + st.buffers[id].name;
    op.writes = {id};
    add(std::move(op));
  }
  Op collective(CollKind kind, std::string name, int64_t src, int64_t dst,
                double bytes, bool overReplicas = false) {
    Op op;
    op.kind = OpKind::Collective;
    op.phase = phase;
    op.coll = kind;
    op.name = std::move(name);
    // One list per axis for the whole step.
    static const NameList shardAxes{"dp_shard"}, replicaAxes{"dp_replicate"};
    op.meshAxes = overReplicas ? replicaAxes : shardAxes;
    op.ranks = overReplicas ? o.replicate : S;
    op.interNode = overReplicas ? true : !o.shardIntraNode;
    op.collBytes = bytes;
    op.comm = overReplicas ? 1 : 0;
    op.reads = {src};
    op.writes = {dst};
    return op;
  }

  void collectGroups();

  /// Shards, owned matrices, states: everything that lives all step.
  void declarePersistent();

  /// The elements a block shard is padded by: its blocks are dealt
  /// round-robin, and every rank's shard holds ceil(blocks / S) of them.
  int64_t blockPaddingElements(const Param &p) const;

  double gatheredBytes(const GroupInfo &g) const;

  /// A group's unreduced gradients as its reductions read them: in the
  /// reduce dtype where that is wider than the parameters' own (a bf16
  /// gradient widened into an fp32 reduction buffer, as FSDP2 does under
  /// reduce_dtype=fp32).
  double unreducedBytes(const GroupInfo &g) const;

  /// One all-gather of rows and one all-gather-v of owner matrices per
  /// unit, all at the group's first use; mfsdp-bucket-collectives merges
  /// them. The rows of units that copy land in a gather staging buffer,
  /// copied out into the gathered buffer, then freed.
  void gather(size_t gi, const char *why);

  /// A copy of the copied units' rows (GroupInfo::Piece::copied) from
  /// `from` into `to`: out of the gather staging into the gathered buffer
  /// (after the gather is waited for, where the runtime unpacks), or out
  /// of the unreduced gradients into the reduce staging (before their
  /// reduction, where the runtime packs).
  void copy(size_t gi, bool gatherSide, int64_t from, int64_t to);

  void compute(int64_t unit, Phase ph, const char *what, double flopsPerToken,
               int64_t reads, int64_t writes);

  void forward(int64_t m);

  void backward(int64_t m, bool last);

  /// What a reduction of `params` moves: their elements in the reduce
  /// dtype (BuildOptions::reduceElemBytes), or in their own when it is 0.
  double reducedBytes(const std::vector<const Param *> &params) const;

  /// Per unit, in backward order: reduce-scatter of rows, reduce-scatter-v
  /// to the owners (under ZeRO-1 too: the gradient buffers stay whole, as
  /// in Megatron's distributed optimizer, but each rank steps its own part
  /// only, so its part is all it needs reduced), and over dp_replicate an
  /// all-reduce of what this rank keeps.
  void reduce(size_t gi, int64_t grads);

  void optimizerOp(std::string kind, std::string name, size_t gi, double flops,
                   double bytes, int64_t onlyRank, NameList params,
                   int64_t reads = -1, int64_t writes = -1, bool torchNs = false);

  /// torch.optim.Muon on one matrix's DTensor row shards: the momentum
  /// update on the local shard, then dtensorNewtonSchulz()'s ops, each
  /// preceded by its redistributions (synchronous on the compute stream in
  /// DTensor, so every one is between the op that produces its operand and
  /// the op that reads it), then the parameter update on the local shard.
  void dtensorMuon(size_t gi, const Param &p);

  void optimizer();

  const planner::Problem &pr;
  const planner::Options &o;
  const planner::Decisions &d;
  const std::vector<UnitCost> &costs;
  const BuildOptions &b;
  const int64_t S;
  Step st;
  Phase phase = Phase::Forward;
  std::vector<GroupInfo> groups;
  std::vector<int64_t> activations;
};

} // namespace mfsdp::step::detail

#endif // MFSDP_LIB_STEP_STEPBUILDER_H
