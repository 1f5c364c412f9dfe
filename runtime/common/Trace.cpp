//===- Trace.cpp - The runtime's Chrome / Perfetto trace -------------------===//
//
// Events are kept in memory and appended to the file at each flush (the end
// of every optimizer step, an error, mfsdp_destroy), followed by the
// closing brackets; the next flush writes over those brackets. So the file
// is complete JSON after every flush, and writing costs one append per
// step.
//
//===----------------------------------------------------------------------===//
#include "Trace.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace mfsdp::rt {

namespace {

thread_local Trace *currentTrace = nullptr;

/// Sets the calling thread's current trace for one backend call.
class Current {
public:
  explicit Current(Trace *t) : saved(currentTrace) { currentTrace = t; }
  ~Current() { currentTrace = saved; }

private:
  Trace *saved;
};

const char *const kTail = "\n],\"displayTimeUnit\":\"ms\"}\n";

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

const char *groupName(Group g) {
  return g == Group::Shard ? "dp_shard" : "dp_replicate";
}

int64_t sum(const std::vector<int64_t> &counts) {
  int64_t total = 0;
  for (int64_t c : counts)
    total += c;
  return total;
}

} // namespace

std::string Trace::fileFor(const std::string &pattern, int rank) {
  const std::string r = std::to_string(rank);
  std::string out;
  bool replaced = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == 'r') {
      out += r;
      ++i;
      replaced = true;
    } else {
      out += pattern[i];
    }
  }
  return replaced ? out : out + ".rank" + r + ".json";
}

std::unique_ptr<Trace> Trace::open(const char *configPath, int rank,
                                   const mfsdp_plan &plan, std::string &error) {
  std::string pattern = configPath ? configPath : "";
  if (pattern.empty())
    if (const char *env = std::getenv("MFSDP_TRACE"))
      pattern = env;
  if (pattern.empty())
    return nullptr;
  std::unique_ptr<Trace> t(new Trace());
  t->rank = rank;
  t->path = fileFor(pattern, rank);
  t->file = std::fopen(t->path.c_str(), "w");
  if (!t->file) {
    error = "cannot write the trace file '" + t->path + "' (MFSDP_TRACE or "
            "mfsdp_config.trace_path): " + std::strerror(errno);
    return nullptr;
  }
  for (int32_t i = 0; i < plan.num_params; ++i) {
    const mfsdp_param_desc &d = plan.params[i];
    t->paramNames.push_back(d.name ? d.name : "param " + std::to_string(i));
    t->paramUnit.push_back(d.unit);
  }
  for (int32_t b = 0; plan.buckets && b < plan.num_buckets; ++b) {
    const mfsdp_bucket &k = plan.buckets[b];
    t->bucketUnit.push_back(k.unit);
    t->bucketParams.emplace_back(k.params, k.params + std::max(k.num_params, 0));
  }
  std::fputs("{\"traceEvents\":[", t->file);
  t->complete("process_name", "__metadata", 0, 0, 0,
              "\"name\":\"rank " + std::to_string(rank) + "\"");
  t->complete("thread_name", "__metadata", 0, 0, 0, "\"name\":\"host\"");
  t->complete("thread_name", "__metadata", 1, 0, 0, "\"name\":\"communication\"");
  t->flush();
  return t;
}

Trace::~Trace() {
  if (!file)
    return;
  flush();
  std::fclose(file);
}

double Trace::now() {
  using namespace std::chrono;
  return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

Trace *Trace::current() { return currentTrace; }

std::string Trace::quote(const std::string &s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

void Trace::complete(const std::string &name, const char *cat, int tid, double ts,
                     double dur, const std::string &args) {
  pending += firstEvent ? "\n" : ",\n";
  firstEvent = false;
  const bool meta = std::strcmp(cat, "__metadata") == 0;
  pending += "{\"name\":" + quote(name) + ",\"ph\":\"" + (meta ? "M" : "X") +
             "\",\"pid\":" + std::to_string(rank) + ",\"tid\":" + std::to_string(tid);
  if (!meta)
    pending += std::string(",\"cat\":\"") + cat + "\",\"ts\":" + number(ts) +
               ",\"dur\":" + number(dur);
  pending += ",\"args\":{" + args + "}}";
}

void Trace::flush() {
  if (!file)
    return;
  if (tailAt >= 0)
    std::fseek(file, tailAt, SEEK_SET);
  std::fputs(pending.c_str(), file);
  pending.clear();
  tailAt = std::ftell(file);
  std::fputs(kTail, file);
  std::fflush(file);
}

void Trace::enterHook(const char *hook, int32_t unit, const char *ph) {
  hookName = hook;
  hookUnit = unit;
  phase = ph;
  about(-1, -1);
}

void Trace::leaveHook() {
  if (hookName == "optimizer_step")
    flush(); // once a step
  hookName.clear();
  hookUnit = -1;
  phase.clear();
  about(-1, -1);
}

std::string Trace::subjectArgs() const {
  std::string a = "\"hook\":" + quote(hookName) + ",\"phase\":" + quote(phase);
  int32_t unit = hookUnit;
  std::vector<int32_t> params;
  if (aboutBucket >= 0 && aboutBucket < static_cast<int32_t>(bucketParams.size())) {
    unit = bucketUnit[aboutBucket];
    params = bucketParams[aboutBucket];
    a += ",\"bucket\":" + std::to_string(aboutBucket);
  } else if (aboutParam >= 0 && aboutParam < static_cast<int32_t>(paramNames.size())) {
    unit = paramUnit[aboutParam];
    params.push_back(aboutParam);
  } else if (!aboutList.empty()) {
    const int32_t first = aboutList.front();
    if (first >= 0 && first < static_cast<int32_t>(paramUnit.size()))
      unit = paramUnit[first];
    params = aboutList;
  }
  a += ",\"unit\":" + std::to_string(unit) + ",\"params\":[";
  for (size_t i = 0; i < params.size(); ++i) {
    const int32_t p = params[i];
    a += (i ? "," : "") +
         quote(p >= 0 && p < static_cast<int32_t>(paramNames.size())
                   ? paramNames[p]
                   : "param " + std::to_string(p));
  }
  return a + "]";
}

Trace::Span &Trace::Span::operator=(Span &&o) noexcept {
  if (this != &o) {
    end();
    trace = std::exchange(o.trace, nullptr);
    name = std::move(o.name);
    args = std::move(o.args);
    cat = o.cat;
    start = o.start;
    tid = o.tid;
    hook = o.hook;
  }
  return *this;
}

void Trace::Span::end() {
  if (!trace)
    return;
  Trace *t = std::exchange(trace, nullptr);
  t->complete(name, cat, tid, start, now() - start, args);
  if (hook)
    t->leaveHook();
}

Trace::Span Trace::hook(Trace *trace, const char *call, int32_t unit,
                        const char *phase) {
  if (!trace)
    return Span();
  trace->enterHook(call, unit, phase);
  std::string name = unit >= 0 ? std::string(call) + "(" + std::to_string(unit) + ")"
                               : std::string(call);
  Span s(trace, std::move(name), "hook",
         "\"hook\":" + quote(call) + ",\"unit\":" + std::to_string(unit) +
             ",\"phase\":" + quote(phase));
  s.hook = true;
  return s;
}

Trace::Span Trace::kernel(Trace *trace, const char *name) {
  if (!trace)
    return Span();
  return Span(trace, name, "kernel",
              "\"kernel\":" + quote(name) + "," + trace->subjectArgs());
}

//===----------------------------------------------------------------------===//
// The traced backend
//===----------------------------------------------------------------------===//

/// Forwards every call to the backend it wraps and records it: collectives
/// (synchronous ones on the communication thread; started ones as a start
/// on the host thread, a wait, and their flight on an "in flight" thread),
/// kernels and copies on the host thread. Allocation, release and
/// queries are not recorded.
class TracedBackend final : public Backend {
public:
  TracedBackend(std::unique_ptr<Backend> inner, Trace &t)
      : inner(std::move(inner)), t(t) {}

  const char *name() const override { return inner->name(); }
  DLDevice device() const override { return inner->device(); }
  int rank(Group g) const override { return inner->rank(g); }
  int size(Group g) const override { return inner->size(g); }
  int reserve(int64_t bytes) override { return inner->reserve(bytes); }
  int allocate(int64_t count, float *&out) override {
    return inner->allocate(count, out);
  }
  int allocateAt(int64_t offset, int64_t count, float *&out) override {
    return inner->allocateAt(offset, count, out);
  }
  void release(float *buf) override { inner->release(buf); }

  int copyFromHost(float *dst, const float *src, int64_t count) override {
    auto s = kernel("copy_from_host", count);
    return inner->copyFromHost(dst, src, count);
  }
  int copyToHost(float *dst, const float *src, int64_t count) override {
    auto s = kernel("copy_to_host", count);
    return inner->copyToHost(dst, src, count);
  }
  int copy(float *dst, const float *src, int64_t count) override {
    auto s = kernel("copy", count);
    return inner->copy(dst, src, count);
  }
  int copy2D(float *dst, int64_t dstPitch, const float *src, int64_t srcPitch,
             int64_t width, int64_t height) override {
    // The runtime's pack and unpack of a bucket without the plan's kernels.
    auto s = kernel("copy_2d", width * height);
    return inner->copy2D(dst, dstPitch, src, srcPitch, width, height);
  }
  int zero(float *buf, int64_t count) override {
    auto s = kernel("zero", count);
    return inner->zero(buf, count);
  }

  int allGather(Group g, const float *send, float *recv, int64_t count) override {
    auto s = sync("all_gather", g, count * size(g));
    return inner->allGather(g, send, recv, count);
  }
  int reduceScatter(Group g, const float *send, float *recv, int64_t count) override {
    auto s = sync("reduce_scatter", g, count * size(g));
    return inner->reduceScatter(g, send, recv, count);
  }
  int allReduce(Group g, float *buf, int64_t count) override {
    auto s = sync("all_reduce", g, count);
    return inner->allReduce(g, buf, count);
  }
  int allGatherV(Group g, const float *send, float *recv,
                 const std::vector<int64_t> &counts) override {
    auto s = sync("all_gather_v", g, sum(counts));
    return inner->allGatherV(g, send, recv, counts);
  }
  int reduceScatterV(Group g, const float *send, float *recv,
                     const std::vector<int64_t> &counts) override {
    auto s = sync("reduce_scatter_v", g, sum(counts));
    return inner->reduceScatterV(g, send, recv, counts);
  }
  int broadcast(Group g, float *buf, int64_t count, int root) override {
    auto s = sync("broadcast", g, count);
    return inner->broadcast(g, buf, count, root);
  }
  int broadcastMany(Group g, const std::vector<BroadcastPart> &parts) override {
    int64_t count = 0;
    for (const BroadcastPart &p : parts)
      count += p.count;
    auto s = sync("broadcast", g, count);
    return inner->broadcastMany(g, parts);
  }
  int allReduceDoubles(Group g, double *values, int64_t count) override {
    Trace::Span s(&t, "all_reduce", "collective",
                  collectiveArgs("all_reduce", g, count * 8, false));
    s.onThread(1);
    return inner->allReduceDoubles(g, values, count);
  }

  int startAllGather(Group g, const float *send, float *recv, int64_t count,
                     CommHandle &handle) override {
    Started st = start("all_gather", g, count * size(g));
    int rc = inner->startAllGather(g, send, recv, count, handle);
    return started(std::move(st), rc, handle);
  }
  int startAllGatherV(Group g, const float *send, float *recv,
                      const std::vector<int64_t> &counts, CommHandle &handle) override {
    Started st = start("all_gather_v", g, sum(counts));
    int rc = inner->startAllGatherV(g, send, recv, counts, handle);
    return started(std::move(st), rc, handle);
  }
  int startReduceScatter(Group g, const float *send, float *recv, int64_t count,
                         CommHandle &handle) override {
    Started st = start("reduce_scatter", g, count * size(g));
    int rc = inner->startReduceScatter(g, send, recv, count, handle);
    return started(std::move(st), rc, handle);
  }
  int startReduceScatterV(Group g, const float *send, float *recv,
                          const std::vector<int64_t> &counts,
                          CommHandle &handle) override {
    Started st = start("reduce_scatter_v", g, sum(counts));
    int rc = inner->startReduceScatterV(g, send, recv, counts, handle);
    return started(std::move(st), rc, handle);
  }
  int startAllReduce(Group g, float *buf, int64_t count, CommHandle &handle) override {
    Started st = start("all_reduce", g, count);
    int rc = inner->startAllReduce(g, buf, count, handle);
    return started(std::move(st), rc, handle);
  }
  int wait(CommHandle handle) override {
    const double begin = Trace::now();
    int rc = inner->wait(handle);
    const double end = Trace::now();
    auto it = inFlight.find(handle);
    if (it != inFlight.end()) {
      const Started &st = it->second;
      t.complete("wait " + st.kind, "wait", 0, begin, end - begin, st.args);
      t.complete(st.kind, "in flight", 2 + st.lane, st.ts, end - st.ts, st.args);
      laneBusy[st.lane] = false;
      inFlight.erase(it);
    }
    return rc;
  }

  int allGatherBF16(Group g, const uint16_t *send, uint16_t *recv,
                    const std::vector<int64_t> &counts, CommHandle *handle) override {
    // The same kinds as the fp32 gathers (the schedule's), at 2 bytes an
    // element.
    bool even = true;
    for (int64_t c : counts)
      even &= c == counts.front();
    const char *kind = even ? "all_gather" : "all_gather_v";
    if (!handle) {
      auto s = sync(kind, g, sum(counts), 2);
      return inner->allGatherBF16(g, send, recv, counts, nullptr);
    }
    Started st = start(kind, g, sum(counts), 2);
    int rc = inner->allGatherBF16(g, send, recv, counts, handle);
    return started(std::move(st), rc, *handle);
  }
  int reduceScatterBF16(Group g, const uint16_t *send, uint16_t *recv,
                        const std::vector<int64_t> &counts, CommHandle *handle) override {
    // The reduce dtype bf16: the fp32 reductions' kinds at 2 bytes an
    // element.
    bool even = true;
    for (int64_t c : counts)
      even &= c == counts.front();
    const char *kind = even ? "reduce_scatter" : "reduce_scatter_v";
    if (!handle) {
      auto s = sync(kind, g, sum(counts), 2);
      return inner->reduceScatterBF16(g, send, recv, counts, nullptr);
    }
    Started st = start(kind, g, sum(counts), 2);
    int rc = inner->reduceScatterBF16(g, send, recv, counts, handle);
    return started(std::move(st), rc, *handle);
  }
  int allReduceBF16(Group g, uint16_t *buf, int64_t count, CommHandle *handle) override {
    if (!handle) {
      auto s = sync("all_reduce", g, count, 2);
      return inner->allReduceBF16(g, buf, count, nullptr);
    }
    Started st = start("all_reduce", g, count, 2);
    int rc = inner->allReduceBF16(g, buf, count, handle);
    return started(std::move(st), rc, *handle);
  }
  int castToBF16(const float *in, uint16_t *out, int64_t count) override {
    auto s = kernel("cast_bf16", count);
    return inner->castToBF16(in, out, count);
  }
  int castFromBF16(const uint16_t *in, float *out, int64_t count) override {
    auto s = kernel("cast_f32", count);
    return inner->castFromBF16(in, out, count);
  }
  int copy2DBF16(uint16_t *dst, int64_t dstPitch, const uint16_t *src, int64_t srcPitch,
                 int64_t width, int64_t height) override {
    auto s = kernel("copy_2d_bf16", width * height);
    return inner->copy2DBF16(dst, dstPitch, src, srcPitch, width, height);
  }
  int castToBF16Strided(uint16_t *dst, int64_t dstPitch, const float *src, int64_t srcPitch,
                        int64_t width, int64_t height) override {
    auto s = kernel("cast_to_bf16_strided", width * height);
    return inner->castToBF16Strided(dst, dstPitch, src, srcPitch, width, height);
  }
  int roundToBF16(float *buf, int64_t count) override {
    auto s = kernel("round_bf16", count);
    return inner->roundToBF16(buf, count);
  }
  int scale(float *buf, int64_t count, float factor) override {
    auto s = kernel("scale", count);
    return inner->scale(buf, count, factor);
  }
  int packBlocks(const float *whole, float *packed, const BlockGrid &grid,
                 int64_t firstBlock, int64_t numBlocks) override {
    auto s = kernel("pack_blocks", numBlocks * grid.blockElems());
    return inner->packBlocks(whole, packed, grid, firstBlock, numBlocks);
  }
  int unpackBlocks(const float *packed, float *whole, const BlockGrid &grid,
                   int64_t firstBlock, int64_t numBlocks) override {
    auto s = kernel("unpack_blocks", numBlocks * grid.blockElems());
    return inner->unpackBlocks(packed, whole, grid, firstBlock, numBlocks);
  }
  int adamwStep(float *param, const float *grad, float *m, float *v, int64_t count,
                const AdamWHyper &h, int64_t step) override {
    auto s = optimizer("adamw", count);
    return inner->adamwStep(param, grad, m, v, count, h, step);
  }
  int sgdStep(float *param, const float *grad, float *buf, int64_t count,
              const SGDHyper &h, int64_t step) override {
    auto s = optimizer("sgd", count);
    return inner->sgdStep(param, grad, buf, count, h, step);
  }
  int adamwMulti(const AdamWTensor *tensors, int64_t n) override {
    int64_t count = 0;
    for (int64_t k = 0; k < n; ++k)
      count += tensors[k].count;
    auto s = optimizer("adamw", count);
    return inner->adamwMulti(tensors, n);
  }
  int sgdMulti(const SGDTensor *tensors, int64_t n) override {
    int64_t count = 0;
    for (int64_t k = 0; k < n; ++k)
      count += tensors[k].count;
    auto s = optimizer("sgd", count);
    return inner->sgdMulti(tensors, n);
  }
  int sumSquares(const std::vector<FloatSpan> &spans, double &out) override {
    int64_t count = 0;
    for (const FloatSpan &f : spans)
      count += f.count;
    auto s = kernel("sum_squares", count);
    return inner->sumSquares(spans, out);
  }
  int64_t muonScratch(int64_t rows, int64_t cols) const override {
    return inner->muonScratch(rows, cols);
  }
  int muonStep(float *param, const float *grad, float *buf, int64_t rows,
               int64_t cols, const MuonHyper &h, float *scratch) override {
    auto s = optimizer("muon", rows * cols);
    Current current(&t); // the backend's Newton-Schulz span
    return inner->muonStep(param, grad, buf, rows, cols, h, scratch);
  }

  int afterTrainer() override { return inner->afterTrainer(); }
  void *kernelStream() override { return inner->kernelStream(); }
  int synchronize() override {
    Trace::Span s(&t, "synchronize", "sync", t.subjectArgs());
    return inner->synchronize();
  }
  const char *lastError() const override { return inner->lastError(); }

private:
  struct Started {
    std::string kind, args;
    double ts = 0;
    size_t lane = 0;
  };

  std::string collectiveArgs(const char *kind, Group g, int64_t bytes, bool async) {
    return "\"kind\":\"" + std::string(kind) + "\"," + t.subjectArgs() +
           ",\"group\":\"" + groupName(g) + "\",\"bytes\":" + std::to_string(bytes) +
           ",\"async\":" + (async ? "true" : "false") +
           ",\"seq\":" + std::to_string(t.nextSeq());
  }
  Trace::Span sync(const char *kind, Group g, int64_t floats, int64_t elemBytes = 4) {
    // A synchronous collective blocks the host: one span on the
    // communication thread.
    Trace::Span s(&t, kind, "collective",
                  collectiveArgs(kind, g, floats * elemBytes, false));
    s.onThread(1);
    return s;
  }
  Started start(const char *kind, Group g, int64_t floats, int64_t elemBytes = 4) {
    Started st;
    st.kind = kind;
    st.args = collectiveArgs(kind, g, floats * elemBytes, true);
    st.ts = Trace::now();
    return st;
  }
  int started(Started st, int rc, CommHandle handle) {
    const double end = Trace::now();
    t.complete("start " + st.kind, "collective", 0, st.ts, end - st.ts, st.args);
    if (rc != 0)
      return rc;
    // Collectives in flight at once overlap without nesting: each gets a
    // thread ("lane") of its own, the first one free.
    st.lane = 0;
    while (st.lane < laneBusy.size() && laneBusy[st.lane])
      ++st.lane;
    if (st.lane == laneBusy.size()) {
      laneBusy.push_back(false);
      t.complete("thread_name", "__metadata", 2 + static_cast<int>(st.lane), 0, 0,
                 "\"name\":\"in flight " + std::to_string(st.lane + 1) + "\"");
    }
    laneBusy[st.lane] = true;
    inFlight[handle] = std::move(st);
    return rc;
  }
  Trace::Span kernel(const char *name, int64_t floats) {
    if (floats == 0)
      return Trace::Span(); // nothing to do
    return Trace::Span(&t, name, "kernel",
                       "\"kernel\":\"" + std::string(name) + "\"," + t.subjectArgs() +
                           ",\"bytes\":" + std::to_string(floats * 4));
  }
  Trace::Span optimizer(const char *name, int64_t floats) {
    return Trace::Span(&t, name, "optimizer",
                       "\"optimizer\":\"" + std::string(name) + "\"," +
                           t.subjectArgs() + ",\"bytes\":" + std::to_string(floats * 4) +
                           ",\"seq\":" + std::to_string(t.nextSeq()));
  }

  std::unique_ptr<Backend> inner;
  Trace &t;
  std::unordered_map<CommHandle, Started> inFlight;
  std::vector<bool> laneBusy; // thread 2 + i holds a collective in flight
};

std::unique_ptr<Backend> Trace::wrap(std::unique_ptr<Backend> inner, Trace &trace) {
  return std::make_unique<TracedBackend>(std::move(inner), trace);
}

} // namespace mfsdp::rt
