//===- Trace.h - The runtime's Chrome / Perfetto trace ------------*- C++ -*-===//
//
// MFSDP_TRACE=path (or mfsdp_config.trace_path) makes every rank write the
// wall time of what it runs as Trace Event Format JSON (docs/runtime.md,
// "Trace"): "X" complete events, ts and dur in microseconds of the
// monotonic clock (one clock for every rank of a machine), pid the world
// rank, tid 0 the host thread (hooks, kernels, starts and waits), tid 1 the
// synchronous collectives and tid 2, 3, ... the started ones, each from its
// start to the end of its wait (one thread per collective in flight at
// once, so that every thread's spans nest). Every collective carries its kind, phase, hook, unit, bucket,
// parameters and bytes in "args", every optimizer kernel its optimizer and
// parameter: tools compare the order with mfsdp-sim --trace
// (test/trace/compare_trace.py).
//
// Off, the runtime holds no Trace and pays one null test per hook and per
// collective or kernel site; the backend is not wrapped.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_RUNTIME_COMMON_TRACE_H
#define MFSDP_RUNTIME_COMMON_TRACE_H

#include "mfsdp/runtime.h"
#include "mfsdp/runtime/Backend.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace mfsdp::rt {

class Trace {
public:
  /// The file a rank writes for `pattern`: every "%r" replaced by the rank;
  /// without one, ".rank<N>.json" appended.
  static std::string fileFor(const std::string &pattern, int rank);

  /// The trace of this rank when one is asked for (`configPath` non-empty,
  /// else $MFSDP_TRACE non-empty), else null. On a file that cannot be
  /// written: null and `error` says which and why.
  static std::unique_ptr<Trace> open(const char *configPath, int rank,
                                     const mfsdp_plan &plan, std::string &error);
  ~Trace(); // flushes and closes: the file is complete JSON

  /// Microseconds of the monotonic clock.
  static double now();

  /// The trace the calling thread's backend call belongs to (set by the
  /// traced backend around a kernel), for spans inside a backend's kernel
  /// (Newton-Schulz); null when tracing is off.
  static Trace *current();

  /// One complete event. `args` is the inside of a JSON object (no braces).
  void complete(const std::string &name, const char *cat, int tid, double ts,
                double dur, const std::string &args);

  /// Writes what was recorded and the closing brackets: the file is whole
  /// JSON from here until the next event is written over the brackets.
  void flush();

  /// The hook being run (set by Span for hooks).
  void enterHook(const char *hook, int32_t unit, const char *phase);
  void leaveHook();

  /// What the next backend calls work on: a bucket (-1: none) or a
  /// parameter (-1: none); both -1 clears it.
  void about(int32_t bucket, int32_t param) {
    aboutBucket = bucket;
    aboutParam = param;
    aboutList.clear();
  }
  /// Several parameters (a fused optimizer call), in their order.
  void aboutParams(const std::vector<int32_t> &params) {
    about(-1, -1);
    aboutList = params;
  }

  /// The args of the current subject: hook, phase, unit, bucket, params.
  std::string subjectArgs() const;
  /// A JSON string.
  static std::string quote(const std::string &s);
  int64_t nextSeq() { return seq++; }

  /// A wall-time span on the host thread, recorded when it ends; a no-op
  /// on a null trace.
  class Span {
  public:
    Span() = default;
    Span(Trace *trace, std::string name, const char *cat, std::string args = "")
        : trace(trace) {
      if (trace) {
        this->name = std::move(name);
        this->cat = cat;
        this->args = std::move(args);
        start = now();
      }
    }
    Span(Span &&o) noexcept { *this = std::move(o); }
    Span &operator=(Span &&o) noexcept;
    Span(const Span &) = delete;
    Span &operator=(const Span &) = delete;
    ~Span() { end(); }
    void end();
    /// Recorded on thread `t` (0 host, 1 communication).
    Span &onThread(int t) {
      tid = t;
      return *this;
    }

  private:
    Trace *trace = nullptr;
    std::string name, args;
    const char *cat = "";
    double start = 0;
    int tid = 0;
    bool hook = false;
    friend class Trace;
  };

  /// The span of a C ABI call (a hook: `unit` >= 0), which the collectives
  /// and kernels inside it name in their args.
  static Span hook(Trace *trace, const char *call, int32_t unit, const char *phase);

  /// The span of a kernel the runtime runs itself (a plan's generated pack
  /// or unpack), named with the current subject.
  static Span kernel(Trace *trace, const char *name);

  /// Wraps `inner` so that every collective, wait and kernel it runs is
  /// recorded.
  static std::unique_ptr<Backend> wrap(std::unique_ptr<Backend> inner, Trace &trace);

private:
  Trace() = default;
  std::FILE *file = nullptr;
  std::string path;
  std::string pending; // events not yet written
  bool firstEvent = true;
  int rank = 0;
  int64_t seq = 0;
  long tailAt = -1; // where the closing brackets start in the file
  // The plan's names, for args.
  std::vector<std::string> paramNames;
  std::vector<int32_t> paramUnit;
  std::vector<std::vector<int32_t>> bucketParams;
  std::vector<int32_t> bucketUnit;
  // The current hook and subject.
  std::string hookName = "";
  int32_t hookUnit = -1;
  std::string phase = "";
  int32_t aboutBucket = -1, aboutParam = -1;
  std::vector<int32_t> aboutList; // aboutParams
  friend class TracedBackend;
};

} // namespace mfsdp::rt

#endif // MFSDP_RUNTIME_COMMON_TRACE_H
