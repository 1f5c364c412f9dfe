//===- Step.h - One training step as a program, in plain C++ -----*- C++ -*-===//
//
// The program every data-parallel rank runs for one training step: buffers,
// the trainer's compute, collectives, waits, optimizer kernels. The sched
// dialect is this program as IR; the step builder, the schedule
// transformations and the simulator work on this struct, and the passes
// convert between the two.
//
// Execution model (CUDA streams, NCCL communicators):
//  - Compute, Optimizer, Wait, Alloc and Free ops run on the compute stream
//    in program order.
//  - A Collective runs on the stream of its communicator (`comm`), in
//    program order among the collectives of that communicator. It cannot
//    start before the compute-stream op issued just before it in program
//    order has finished (the event recorded when it is issued), nor before
//    every rank has reached it.
//  - A synchronous collective (async = false) blocks the compute stream
//    until it ends. An asynchronous one only blocks the compute stream at
//    the Wait op naming it.
//  - Ops with onlyRank >= 0 run on that rank alone (an owner's optimizer
//    work); collectives never do.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_STEP_STEP_H
#define MFSDP_STEP_STEP_H

#include "mfsdp/Kernel.h"
#include "mfsdp/Vocabulary.h"

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace mfsdp::step {

enum class OpKind : uint8_t { Compute, Collective, Wait, Optimizer, Alloc, Free };
// Phases and collective kinds are the shared vocabulary (mfsdp/Vocabulary.h),
// spelled with enumName / parseEnum.
using ::mfsdp::CollKind;
using ::mfsdp::Phase;

std::string_view opKindName(OpKind k);

/// A string of a small vocabulary (a compute kind, an optimizer kernel, a
/// unit's name): kept once per process and held by pointer, so that each of
/// a step's millions of ops holds 8 bytes of it. Reads as a const
/// std::string; compares with strings by value, with another Word by
/// pointer (equal text, same pointer).
class Word {
public:
  Word() = default;
  Word(std::string_view text); // NOLINT: strings convert (op.compute = "copy")
  Word(const std::string &text) : Word(std::string_view(text)) {}
  Word(const char *text) : Word(text ? std::string_view(text) : std::string_view()) {}

  const std::string &str() const { return text_ ? *text_ : empty_(); }
  operator const std::string &() const { return str(); }
  operator std::string_view() const { return str(); }
  bool empty() const { return !text_; }
  size_t size() const { return str().size(); }

  friend bool operator==(const Word &a, const Word &b) { return a.text_ == b.text_; }
  friend bool operator==(const Word &a, std::string_view b) { return a.str() == b; }
  friend bool operator==(const Word &a, const std::string &b) { return a.str() == b; }
  friend bool operator==(const Word &a, const char *b) { return a.str() == b; }
  friend bool operator==(std::string_view a, const Word &b) { return b == a; }
  friend bool operator==(const std::string &a, const Word &b) { return b == a; }
  friend bool operator==(const char *a, const Word &b) { return b == a; }
  template <typename T> friend bool operator!=(const Word &a, const T &b) { return !(a == b); }
  template <typename T,
            typename = std::enable_if_t<!std::is_same_v<std::decay_t<T>, Word>>>
  friend bool operator!=(const T &a, const Word &b) {
    return !(b == a);
  }
  friend bool operator<(const Word &a, const Word &b) { return a.str() < b.str(); }
  friend std::string operator+(const std::string &a, const Word &b) { return a + b.str(); }
  friend std::string operator+(const char *a, const Word &b) { return a + b.str(); }
  friend std::string operator+(const Word &a, const std::string &b) { return a.str() + b; }
  friend std::string operator+(const Word &a, const char *b) { return a.str() + b; }

private:
  static const std::string &empty_();
  const std::string *text_ = nullptr;
};

/// The storage of an immutable list that copies share (NameList, Chunks):
/// read without copying; own() gives values to change, copied first when
/// another list holds them.
template <typename T> class SharedValues {
public:
  using Values = std::vector<T>;

  SharedValues() = default;
  explicit SharedValues(Values &&values)
      : values_(values.empty() ? nullptr : std::make_shared<Values>(std::move(values))) {}

  const Values &get() const {
    static const Values none;
    return values_ ? *values_ : none;
  }
  size_t size() const { return values_ ? values_->size() : 0; }
  /// Whether `other` holds these very values, not only equal ones.
  bool same(const SharedValues &other) const { return values_ == other.values_; }
  /// Whether another list holds these values.
  bool shared() const { return values_ && values_.use_count() > 1; }
  Values &own() {
    if (!values_)
      values_ = std::make_shared<Values>();
    else if (values_.use_count() > 1)
      values_ = std::make_shared<Values>(*values_);
    return *values_;
  }
  void reset() { values_.reset(); }
  /// Frees the room past the values (shared values are left as they are).
  void shrinkToFit() {
    if (values_ && values_.use_count() == 1)
      values_->shrink_to_fit();
  }
  friend bool operator==(const SharedValues &a, const SharedValues &b) {
    return a.same(b) || a.get() == b.get();
  }

private:
  std::shared_ptr<Values> values_;
};

/// The parameters an op carries, by name: an immutable list that the ops
/// carrying the same parameters share (a unit's gathers, its reduction and
/// its optimizer), so that a step of a million ops holds each list once
/// and copying an op copies a pointer. Changed through the list itself,
/// which copies the names first when another op shares them.
class NameList {
public:
  using Names = std::vector<std::string>;
  using const_iterator = Names::const_iterator;

  NameList() = default;
  NameList(Names names) : names_(std::move(names)) {} // NOLINT: a vector converts
  NameList(std::initializer_list<std::string> names) : NameList(Names(names)) {}

  const Names &names() const { return names_.get(); }
  const_iterator begin() const { return names().begin(); }
  const_iterator end() const { return names().end(); }
  size_t size() const { return names_.size(); }
  bool empty() const { return size() == 0; }
  const std::string &operator[](size_t i) const { return names()[i]; }
  const std::string &front() const { return names().front(); }
  /// Whether `other` is this very list (shared), not only the same names.
  bool sameList(const NameList &other) const { return names_.same(other.names_); }
  /// Whether another NameList holds this very list.
  bool shared() const { return names_.shared(); }

  void push_back(std::string name) { names_.own().push_back(std::move(name)); }
  template <typename It> void insert(const_iterator at, It first, It last) {
    const auto offset = at - begin();
    Names &n = names_.own();
    n.insert(n.begin() + offset, first, last);
  }
  void clear() { names_.reset(); }
  /// Frees the room a list grown name by name keeps past its names (a
  /// shared list is left as it is).
  void shrinkToFit() { names_.shrinkToFit(); }

  friend bool operator==(const NameList &a, const NameList &b) {
    return a.names_ == b.names_;
  }
  friend bool operator!=(const NameList &a, const NameList &b) { return !(a == b); }

private:
  SharedValues<std::string> names_;
};

/// The bytes each rank contributes to a *_v collective: an immutable list
/// that the ops moving the same chunks share (a unit's gathers and its
/// reduction), so that copying an op copies a pointer (a step of 100,000
/// units holds a list of dp_shard values for hundreds of thousands of
/// ops). Changed through the list itself (assign, push_back, add), which
/// copies the values first when another op shares them; reading never
/// copies.
class Chunks {
public:
  using Values = std::vector<double>;
  using const_iterator = Values::const_iterator;

  Chunks() = default;
  Chunks(Values values) : values_(std::move(values)) {} // NOLINT: a vector converts
  Chunks(std::initializer_list<double> values) : Chunks(Values(values)) {}

  const Values &values() const { return values_.get(); }
  const_iterator begin() const { return values().begin(); }
  const_iterator end() const { return values().end(); }
  size_t size() const { return values_.size(); }
  bool empty() const { return size() == 0; }
  double operator[](size_t i) const { return values()[i]; }

  void assign(size_t n, double value) {
    values_ = SharedValues<double>(Values(n, value));
  }
  void push_back(double value) { values_.own().push_back(value); }
  /// Adds `value` to rank `i`'s chunk.
  void add(size_t i, double value) { values_.own()[i] += value; }

  friend bool operator==(const Chunks &a, const Chunks &b) { return a.values_ == b.values_; }
  friend bool operator!=(const Chunks &a, const Chunks &b) { return !(a == b); }
  friend bool operator==(const Chunks &a, const Values &b) { return a.values() == b; }
  friend bool operator!=(const Chunks &a, const Values &b) { return !(a == b); }

private:
  SharedValues<double> values_;
};

struct Buffer {
  std::string name;
  double bytes = 0;
  bool persistent = false; // lives for the whole step (shards, state)
  int64_t onlyRank = -1;   // >= 0: exists on that rank alone
  int64_t offset = -1;     // arena offset, once memory is planned
};

struct Op {
  // The small fields together (a step holds millions of ops).
  OpKind kind = OpKind::Compute;
  // Collective:
  bool interNode = false;            // the group spans nodes
  bool async = false;
  /// Optimizer: its FLOPs are torch.optim.Muon's Newton-Schulz (bf16, three
  /// GEMMs per iteration; the peers' baselines), priced at
  /// gemmFlops * nsTorchEfficiency; otherwise an optimizer's FLOPs are the
  /// runtime's Newton-Schulz, at planner::nsFlopsRate.
  bool torchNs = false;
  Phase phase = Phase::Forward;
  CollKind coll = CollKind::AllGather; // Collective
  /// Optimizer: the kernels the runtime's Newton-Schulz launches for it
  /// (rt::newtonSchulzKernels over its matrices), each priced at
  /// planner::nsKernelSeconds beside the FLOPs; for a torchNs op the
  /// kernels torch.optim.Muon launches for it (planner::torchMuonKernels),
  /// its time at least that many times the profile's nsTorchKernelSeconds.
  int32_t nsKernels = 0;
  std::string name; // shown in reports and traces ("forward layers.3")
  int64_t unit = -1;
  int64_t group = -1;
  int64_t onlyRank = -1;

  // Compute and Optimizer: GEMM FLOPs and memory traffic in bytes.
  double flops = 0;
  double bytes = 0;
  // Compute of a unit (forward, backward, recompute): the unit's kernels
  // per token (mfsdp/Kernel.h) and the tokens they run on; the cost model
  // prices them one by one when present, else `flops` and `bytes` as one.
  KernelList kernels;
  double kernelTokens = 0;

  // Collective.
  NameList meshAxes;                 // e.g. {"dp_shard"}
  int64_t ranks = 1;                 // group size
  double collBytes = 0;              // the full (gathered / unreduced) buffer
  Chunks chunks;                     // *_v: bytes contributed by each rank
  int64_t comm = 0;                  // communicator (its own stream)
  NameList params;                   // parameters the collective carries

  // Wait: index of the collective op it waits for.
  int64_t waitFor = -1;

  // Buffers read and written (indices into Step::buffers); Alloc/Free name
  // one buffer in `writes`.
  std::vector<int64_t> reads, writes;

  // Optimizer: the kernel ("adamw", "sgd", "muon", "cast", "accumulate").
  Word optimizer;
  // Compute: "forward", "backward", "recompute" or "copy", and the unit.
  Word compute;
  Word unitName;

  // Index of the IR op this op was read from (the bridge keeps their
  // locations); transformations copy it along with the op. -1: made here.
  int64_t origin = -1;
};

/// A step's ops, indexed as a vector but held in fixed chunks of
/// kChunkOps. A step of 100,000 units holds millions of ops (close to a
/// gigabyte): a vector would hold two copies at each doubling, and a pass
/// that consumes the ops in order (writing them as IR, feeding a schedule
/// stage) could not free any before the last. Here growing never moves an
/// op, and `releaseBefore` frees the chunks a consumer is done with.
/// Slots past size() in the last chunk hold default ops.
class OpArray {
public:
  static constexpr size_t kChunkShift = 12;
  static constexpr size_t kChunkOps = size_t(1) << kChunkShift;

  template <bool Const> class Iter {
  public:
    using iterator_category = std::random_access_iterator_tag;
    using value_type = Op;
    using difference_type = std::ptrdiff_t;
    using reference = std::conditional_t<Const, const Op &, Op &>;
    using pointer = std::conditional_t<Const, const Op *, Op *>;
    using Owner = std::conditional_t<Const, const OpArray, OpArray>;

    Iter() = default;
    Iter(Owner *a, size_t i) : a_(a), i_(i) {}
    template <bool C, typename = std::enable_if_t<Const && !C>>
    Iter(const Iter<C> &o) : a_(o.a_), i_(o.i_) {} // NOLINT: iterator to const

    size_t index() const { return i_; }
    reference operator*() const { return (*a_)[i_]; }
    pointer operator->() const { return &(*a_)[i_]; }
    reference operator[](difference_type n) const { return (*a_)[i_ + n]; }
    Iter &operator++() { ++i_; return *this; }
    Iter operator++(int) { Iter t = *this; ++i_; return t; }
    Iter &operator--() { --i_; return *this; }
    Iter operator--(int) { Iter t = *this; --i_; return t; }
    Iter &operator+=(difference_type n) { i_ += n; return *this; }
    Iter &operator-=(difference_type n) { i_ -= n; return *this; }
    friend Iter operator+(Iter it, difference_type n) { return it += n; }
    friend Iter operator+(difference_type n, Iter it) { return it += n; }
    friend Iter operator-(Iter it, difference_type n) { return it -= n; }
    friend difference_type operator-(const Iter &a, const Iter &b) {
      return static_cast<difference_type>(a.i_) - static_cast<difference_type>(b.i_);
    }
    friend bool operator==(const Iter &a, const Iter &b) { return a.i_ == b.i_; }
    friend bool operator!=(const Iter &a, const Iter &b) { return a.i_ != b.i_; }
    friend bool operator<(const Iter &a, const Iter &b) { return a.i_ < b.i_; }
    friend bool operator>(const Iter &a, const Iter &b) { return a.i_ > b.i_; }
    friend bool operator<=(const Iter &a, const Iter &b) { return a.i_ <= b.i_; }
    friend bool operator>=(const Iter &a, const Iter &b) { return a.i_ >= b.i_; }

  private:
    template <bool> friend class Iter;
    Owner *a_ = nullptr;
    size_t i_ = 0;
  };
  using iterator = Iter<false>;
  using const_iterator = Iter<true>;
  using value_type = Op;

  OpArray() = default;
  OpArray(std::vector<Op> ops) { // NOLINT: a vector converts (s.ops = ops)
    for (Op &op : ops)
      push_back(std::move(op));
  }
  OpArray(std::initializer_list<Op> ops) {
    for (const Op &op : ops)
      push_back(op);
  }
  OpArray(OpArray &&other) noexcept
      : chunks_(std::move(other.chunks_)), size_(other.size_), released_(other.released_) {
    other.size_ = other.released_ = 0;
  }
  OpArray &operator=(OpArray &&other) noexcept {
    chunks_ = std::move(other.chunks_);
    size_ = other.size_;
    released_ = other.released_;
    other.size_ = other.released_ = 0;
    return *this;
  }
  OpArray(const OpArray &other) { *this = other; }
  OpArray &operator=(const OpArray &other);

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  /// Ops the chunks already made can hold without another.
  size_t capacity() const { return chunks_.size() << kChunkShift; }
  Op &operator[](size_t i) {
    assert(chunks_[i >> kChunkShift] && "an op read after its chunk was released");
    return chunks_[i >> kChunkShift][i & (kChunkOps - 1)];
  }
  const Op &operator[](size_t i) const {
    assert(chunks_[i >> kChunkShift] && "an op read after its chunk was released");
    return chunks_[i >> kChunkShift][i & (kChunkOps - 1)];
  }
  Op &front() { return (*this)[0]; }
  const Op &front() const { return (*this)[0]; }
  Op &back() { return (*this)[size_ - 1]; }
  const Op &back() const { return (*this)[size_ - 1]; }
  iterator begin() { return {this, 0}; }
  iterator end() { return {this, size_}; }
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, size_}; }

  void push_back(Op op) {
    if (size_ == capacity())
      chunks_.push_back(std::make_unique<Op[]>(kChunkOps));
    (*this)[size_++] = std::move(op);
  }
  void pop_back() { (*this)[--size_] = Op(); }
  /// Room in the chunk table for `n` ops (the chunks come as ops do).
  void reserve(size_t n) { chunks_.reserve((n + kChunkOps - 1) >> kChunkShift); }
  void resize(size_t n);
  void clear();
  iterator insert(const_iterator at, Op op);
  iterator erase(const_iterator at) { return erase(at, at + 1); }
  iterator erase(const_iterator first, const_iterator last);

  /// Frees every chunk that lies wholly before op `i`: a consumer going
  /// in order is done with those ops, which must not be read again (their
  /// indices stay; clear() empties the array).
  void releaseBefore(size_t i);
  /// Chunks held now (made and not released).
  size_t chunksHeld() const { return chunks_.size() - released_; }

private:
  std::vector<std::unique_ptr<Op[]>> chunks_;
  size_t size_ = 0;
  size_t released_ = 0; // chunks freed by releaseBefore
};

struct Step {
  std::string name;
  int64_t world = 1;        // ranks the program runs on (dp_shard group)
  int64_t tokens = 0;       // tokens per rank per microbatch
  int64_t microbatches = 1;
  std::vector<Buffer> buffers;
  OpArray ops;
};

/// A shard copy (`compute` "copy"): a per_param unit's rows copied out of
/// the staging its gathers fill, or its gradients into the staging its
/// reductions read.
inline bool isShardCopy(const Op &op) {
  return op.kind == OpKind::Compute && op.compute == "copy";
}

/// A unit's forward, backward or recompute: a Compute op outside the
/// optimizer phase that is not a shard copy.
inline bool isUnitCompute(const Op &op) {
  return op.kind == OpKind::Compute && !isShardCopy(op) && op.phase != Phase::Optimizer;
}

/// The gathered copies of `s`: each buffer a gather (`isGather(op)`)
/// writes, but where a shard copy reads one (the staging of copied rows)
/// the buffer the copy writes in its place; with, for each, the index of
/// the gather that fills it (the first).
template <typename IsGather>
std::vector<std::pair<int64_t, size_t>> gatheredCopies(const Step &s, IsGather isGather) {
  std::vector<std::pair<int64_t, size_t>> out;
  // Per buffer, the gather that fills it; -1 none, -2 staging.
  std::vector<int64_t> filler(s.buffers.size(), -1);
  auto known = [&](int64_t b) { return b >= 0 && static_cast<size_t>(b) < filler.size(); };
  for (size_t i = 0; i < s.ops.size(); ++i) {
    const Op &op = s.ops[i];
    if (isGather(op)) {
      for (int64_t b : op.writes)
        if (known(b) && filler[b] < 0)
          filler[b] = static_cast<int64_t>(i);
    } else if (isShardCopy(op)) {
      int64_t from = -1; // the gather that filled what it reads
      for (int64_t b : op.reads)
        if (known(b) && filler[b] >= 0)
          from = filler[b];
      if (from < 0)
        continue; // out of the gradients
      for (int64_t b : op.reads)
        if (known(b))
          filler[b] = -2;
      for (int64_t b : op.writes)
        if (known(b) && filler[b] == -1)
          filler[b] = from;
    }
  }
  for (size_t b = 0; b < filler.size(); ++b)
    if (filler[b] >= 0)
      out.push_back({static_cast<int64_t>(b), static_cast<size_t>(filler[b])});
  return out;
}

/// Per op of `s`, the microbatch it belongs to (optimizer ops: the last).
/// Each microbatch runs a forward then a backward; the next one starts, in
/// the ops between a backward compute and the forward compute after it,
/// at the first op of the forward phase (its allocs and gathers).
std::vector<int64_t> microbatchOf(const Step &s);

} // namespace mfsdp::step

#endif // MFSDP_STEP_STEP_H
