//===- CheckpointCommon.h - What mfsdp_save and mfsdp_load share -*- C++ -*-===//
//
// The file format's constants, the rectangles of a tensor a rank keeps,
// checksums, synced writes and reads, and the agreements between ranks,
// shared by the save (CheckpointFiles.cpp) and the load
// (CheckpointLoad.cpp). Internal to the runtime.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_RUNTIME_COMMON_CHECKPOINTCOMMON_H
#define MFSDP_RUNTIME_COMMON_CHECKPOINTCOMMON_H

#include "Step.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mfsdp::rt::ckpt {


inline constexpr const char *kFormat = "mfsdp-checkpoint";
inline constexpr int kFormatVersion = 1;
/// The __metadata__ key of a rank file that holds its save's id (the
/// index's "id"); files written before it existed have none.
inline constexpr const char *kCheckpointIdKey = "mfsdp_checkpoint_id";
inline constexpr const char *kIndex = "index.json";

enum Kind { Master = 0, ExpAvg = 1, ExpAvgSq = 2, NumKinds };
inline const char *const kKindNames[NumKinds] = {"master", "exp_avg", "exp_avg_sq"};

/// A rectangle of a whole (rows x cols) tensor and where it lies in a
/// buffer (row-major and contiguous there).
struct Rect {
  int64_t r0 = 0, r1 = 0, c0 = 0, c1 = 0;
  int64_t at = 0; // element offset in the buffer
  int64_t area() const { return (r1 - r0) * (c1 - c0); }
};


/// The kinds a parameter's optimizer keeps (master always).
std::vector<int> kindsOf(int32_t optimizer);
/// The rectangles of the whole tensor that this rank's buffer of `ps`
/// (master, exp_avg, exp_avg_sq: all laid out alike) holds.
std::vector<Rect> localRects(const mfsdp_step &st, const ParamState &ps);
/// FNV-1a over bytes, continuing from `h`.
inline constexpr uint64_t kFnvBasis = 1469598103934665603ull;
uint64_t fnv1a(const void *data, size_t n, uint64_t h = kFnvBasis);
/// The pieces' and files' checksum ("fnv1a64x4").
uint64_t checksum(const void *data, size_t n);
std::string hex64(uint64_t v);
std::string errnoText();
/// Writes `parts` to `path` and fsyncs it; false with `error`.
bool writeSynced(const std::string &path, const std::vector<std::string_view> &parts,
                 std::string &error);
bool syncDirectory(const std::string &path, std::string &error);
bool readWhole(const std::string &path, std::string &out, std::string &error);
bool readAt(int fd, int64_t offset, void *to, int64_t bytes);
std::string parentOf(const std::string &dir);
/// A safetensors file's JSON header (the 8-byte little-endian length, then
/// the text) and where its data starts; throws std::runtime_error naming
/// `path` when the file cannot hold it. `fileBytes`: the file's size.
std::string readSafetensorsHeader(int fd, const std::string &path, int64_t fileBytes,
                                  int64_t &dataStart);
/// The status every rank ends with: the worst of all.
mfsdp_status agree(mfsdp_step *step, mfsdp_status mine, const char *what);
/// Whether this rank is the first coordinate of every outer dim.
bool outerPrimary(const mfsdp_step &st);
/// Whether this rank writes kind `k` of `ps` (one copy of each piece).
bool writes(const mfsdp_step &st, const ParamState &ps, int k, bool primary);
float *bufferOf(ParamState &ps, int k);
const char *placementName(int32_t p);
mfsdp_status usableForCheckpoint(mfsdp_step *step, const char *call);
/// After masters were loaded: the gathered compute copies are dropped and,
/// under ZeRO-1/2 (copies kept all step), gathered again from them.
mfsdp_status followMasters(mfsdp_step *step);
/// The end of a load's writing (`what`: "a load", "an HF load"), `local`
/// this rank's status: the ranks agree that every buffer was written
/// before the gathered copies follow the masters (collectives under
/// ZeRO-1/2, which a failed rank would skip), then agree again. A failure
/// in either leaves the parameters partly loaded: the runtime stops on
/// every rank rather than train on them.
mfsdp_status commitLoaded(mfsdp_step *step, mfsdp_status local, const std::string &what);
/// A matrix of a fused expert tensor as a plan names it: `name` =
/// PREFIX ".experts." KIND "." E ["." TAIL], E at most 9 decimal digits
/// (`experts.gate_up_proj.3.gate`, `experts.down_proj.3`). True with the
/// parts.
bool expertMatrixName(const std::string &name, const std::string &kind,
                      std::string &prefix, int64_t &e, std::string &tail);
/// The ranks agree on a new directory `target` (rank 0's name, with a
/// fresh 16-hex-digit `id`), and rank 0 makes `tmp` = target.tmp-ID to
/// write into (an error if `target` exists). `local`: this rank's status
/// so far. The agreed status (every rank's worst).
mfsdp_status newDirectory(mfsdp_step *step, mfsdp_status local, const std::string &target,
                          const char *call, const char *what, std::string &id,
                          std::string &tmp);
/// The crash tests' kill points (MFSDP_CHECKPOINT_KILL).
void killPoint(const char *stage);
std::string fileName(int rank);

} // namespace mfsdp::rt::ckpt

#endif // MFSDP_RUNTIME_COMMON_CHECKPOINTCOMMON_H
