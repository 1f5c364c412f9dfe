//===- Schedule.h - Bucketing, overlap, memory and verification -*- C++ -*-===//
//
// The schedule transformations of the step program, as plain C++; the
// mfsdp-bucket-collectives, mfsdp-schedule-overlap, mfsdp-plan-memory and
// mfsdp-verify-schedule passes call them.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_STEP_SCHEDULE_H
#define MFSDP_STEP_SCHEDULE_H

#include "mfsdp/step/Step.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace mfsdp::step {

/// Merges the synchronous collectives issued together (a run of adjacent
/// collective ops) that share kind, mesh axes, communicator, buffers and
/// phase into flat buckets of at most `limitBytes` (0: no limit); a bucket's
/// owner chunks add up rank by rank, so each rank's chunk stays contiguous.
/// Returns the number of collectives removed.
int64_t bucketCollectives(Step &s, double limitBytes);

/// Makes the ops of `s` that carry the same parameters, in the same order,
/// share one list (step::NameList), each sized to its names: after
/// bucketing, a unit's gathers and its reduction carry equal lists, built
/// apart name by name. bucketCollectives does it; returns the number of
/// lists given up for another.
int64_t shareNameLists(Step &s);

/// A bucket limit of `bytes` as a step records it (`bucket_bytes`): whole
/// bytes, 0 (no limit) for 0, at least 1 byte for any other.
int64_t bucketLimitBytes(double bytes);

struct OverlapOptions {
  int64_t prefetch = 1;          // gather this many groups ahead (0: none)
  double maxInflightBytes = 0;   // cap on gathered bytes alive (0: none)
  bool separateGatherComm = false; // gathers on their own communicator
  /// Order of the optimizer phase's groups. -1: the order their reductions
  /// land (the last group first). k >= 0: the first k groups in landing
  /// order (work that fills the wait for the last reduction), then the rest
  /// first unit first, so the group the next step gathers first is updated
  /// early. cost::chooseOptimizerFill picks k with the simulator.
  int64_t optimizerFill = -1;
};

/// Splits every collective into an async start and a wait placed just
/// before the first op that needs it; prefetches gathers `prefetch` groups
/// ahead in forward and backward (in backward the gather of the next group
/// is issued before the current group's reduce, as one communicator runs
/// collectives in issue order); orders the optimizer's groups as
/// `optimizerFill` says.
void scheduleOverlap(Step &s, const OverlapOptions &options);

/// scheduleOverlap in two parts: prepareOverlap does what does not depend
/// on `optimizerFill` (prefetch, communicators), finishOverlap the rest
/// (the optimizer order, async starts and waits, deferred frees). The
/// optimizer-order search prepares once and finishes a copy per candidate.
void prepareOverlap(Step &s, const OverlapOptions &options);
void finishOverlap(Step &s, const OverlapOptions &options);

/// finishOverlap of the prepared `s` for `firstFill`, then for each fill
/// `visit` names, in turn: `visit` sees each result (the step finishOverlap
/// makes for that fill) and returns the next fill to schedule, or nullopt
/// to stop, leaving `s` scheduled for the fill it was given. The order only
/// moves ops of the optimizer phase, so the ops before it get their starts
/// and waits once, and each fill only schedules the optimizer phase: the
/// optimizer-order search costs one schedule and a tail per candidate, not
/// one whole schedule and a copy of the step each.
/// `sharedOps`, when given, is set before the first visit to the number of
/// leading ops every fill's schedule has the same.
void finishOverlapEach(
    Step &s, const OverlapOptions &options, int64_t firstFill,
    const std::function<std::optional<int64_t>(int64_t fill,
                                               const Step &scheduled)> &visit,
    size_t *sharedOps = nullptr);

struct MemoryPlan {
  std::vector<double> arenaBytes; // per rank: the arena the offsets need
  std::vector<double> peakBytes;  // per rank: the most bytes live at once
  std::vector<int64_t> peakOp;    // per rank: op after which the peak is live
};

/// Places every buffer at an offset of its rank's arena (Buffer::offset),
/// sharing space between buffers whose lifetimes (alloc to free, extended
/// to the wait of any collective using them) do not overlap. Buffers of
/// different ranks (onlyRank) never conflict.
MemoryPlan planMemory(Step &s, int64_t alignment = 256);

/// Buffers with only the order they are allocated and freed in (no other
/// op): what the step library's memory plan places
/// (step::planRuntimeMemory), a tenth of a step's ops in memory.
struct BufferEvents {
  struct Event {
    bool alloc = true; // else a free
    int64_t buffer = -1;
  };
  int64_t world = 1;
  std::vector<Buffer> buffers;
  std::vector<Event> events;
  /// The name of a buffer whose `name` is empty, made only for a message
  /// (a step library has millions of buffers); unset: the empty name.
  std::function<std::string(size_t)> describe;

  /// Buffer `b`'s name: its `name`, or what `describe` makes of it.
  std::string nameOf(size_t b) const {
    return buffers[b].name.empty() && describe ? describe(b) : buffers[b].name;
  }
};

/// planMemory for `e`: its buffers placed as a step's with the same
/// buffers, whose allocs and frees come in the same order, would be.
MemoryPlan planMemory(BufferEvents &e, int64_t alignment = 256);

struct ScheduleIssue {
  int64_t op = -1;
  std::string message;
};

/// The placement of the buffers that have an offset (planMemory's, or the
/// step library's): no two that are live at once on a rank share a byte of
/// the arena (persistent buffers all step; others from each Alloc to its
/// Free, or to the end: a Free while a collective still reads the buffer is
/// verifySchedule's own finding). At most `maxIssues` issues, each at the
/// Alloc that makes the overlap (-1: persistent buffers); an overlap on
/// several ranks is named on one.
std::vector<ScheduleIssue> verifyPlacement(const Step &s, size_t maxIssues = 16);
/// verifyPlacement for `e` (the issues' `op` index its events).
std::vector<ScheduleIssue> verifyPlacement(const BufferEvents &e, size_t maxIssues = 16);

/// Everything that would make the step wrong: a buffer used before the
/// wait of the collective that fills it, or freed or overwritten while a
/// collective still uses it; a buffer used after it is freed; a collective
/// that only some ranks issue (a deadlock); buffers live at once at
/// overlapping offsets (verifyPlacement); a rank's arena over `capBytes`
/// (0: no cap). Empty when the schedule is sound.
std::vector<ScheduleIssue> verifySchedule(const Step &s, double capBytes);

} // namespace mfsdp::step

#endif // MFSDP_STEP_SCHEDULE_H
