//===- CheckpointFiles.cpp - Sharded checkpoints on disk ------------------===//
//
// mfsdp_save / mfsdp_load (runtime.h): every rank writes only what it
// keeps (row shards, owned matrices, block shards, replicated tensors on
// shard rank 0; dp_replicate replica 0 and the first coordinate of every
// outer dim, or under ns_split the replica that steps an owned Muon matrix
// for its momentum) into one safetensors file, each piece a rectangle of
// the whole tensor; rank 0 writes the index (plan hash, mesh, policy,
// shapes, files and their checksums, step count, the user's dictionary).
// Written into a temporary directory, every file and the directory
// fsynced, the index last, then renamed: a kill at any moment leaves no
// directory of that name, or a complete one.
//
// A load reads, on each rank, the rectangles that overlap what it keeps
// under its own plan, from whatever mesh, placement or ZeRO level wrote
// them (resharding), checking each piece's checksum; the ranks agree on
// the index they read, and a model that differs is an error listing the
// differences.
//
// The safetensors layout (https://huggingface.co/docs/safetensors): an
// 8-byte little-endian header length, a JSON header naming each tensor's
// dtype, shape and byte range in the data that follows, then the data.
//
//===----------------------------------------------------------------------===//
#include "Step.h"

#include "mfsdp/runtime/ControlPlane.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

using namespace mfsdp::rt;
using json = nlohmann::json;

namespace {

constexpr const char *kFormat = "mfsdp-checkpoint";
constexpr int kFormatVersion = 1;
constexpr const char *kIndex = "index.json";

enum Kind { Master = 0, ExpAvg = 1, ExpAvgSq = 2, NumKinds };
const char *const kKindNames[NumKinds] = {"master", "exp_avg", "exp_avg_sq"};

/// The kinds a parameter's optimizer keeps (master always).
std::vector<int> kindsOf(int32_t optimizer) {
  switch (optimizer) {
  case MFSDP_OPT_ADAMW:
    return {Master, ExpAvg, ExpAvgSq};
  case MFSDP_OPT_SGD:
  case MFSDP_OPT_MUON:
    return {Master, ExpAvg};
  default:
    return {Master};
  }
}

/// A rectangle of a whole (rows x cols) tensor and where it lies in a
/// buffer (row-major and contiguous there).
struct Rect {
  int64_t r0 = 0, r1 = 0, c0 = 0, c1 = 0;
  int64_t at = 0; // element offset in the buffer
  int64_t area() const { return (r1 - r0) * (c1 - c0); }
};

/// The rectangles of the whole tensor that this rank's buffer of `ps`
/// (master, exp_avg, exp_avg_sq: all laid out alike) holds.
std::vector<Rect> localRects(const mfsdp_step &st, const ParamState &ps) {
  const mfsdp_param_desc &d = ps.desc;
  std::vector<Rect> out;
  switch (d.placement) {
  case MFSDP_ROW_SHARD:
    if (ps.localRows > 0) {
      const int64_t r0 = st.shardRank * ps.chunkRows;
      out.push_back({r0, r0 + ps.localRows, 0, d.cols, 0});
    }
    break;
  case MFSDP_OWNER:
    if (d.owner == st.shardRank)
      out.push_back({0, d.rows, 0, d.cols, 0});
    break;
  case MFSDP_BLOCK_SHARD: {
    const BlockGrid &g = ps.grid;
    const int64_t first = g.firstBlockOf(st.shardRank), n = g.blocksOf(st.shardRank);
    for (int64_t t = first; t < first + n; ++t) {
      const int64_t k = g.blockAt(t);
      const int64_t br = k / g.gridCols(), bc = k % g.gridCols();
      out.push_back({br * g.blockRows, (br + 1) * g.blockRows, bc * g.blockCols,
                     (bc + 1) * g.blockCols, (t - first) * g.blockElems()});
    }
    break;
  }
  default: // replicated, or a plan entry with no placement: whole
    out.push_back({0, d.rows, 0, d.cols, 0});
    break;
  }
  return out;
}

constexpr uint64_t kFnvPrime = 1099511628211ull;
constexpr uint64_t kFnvBasis = 1469598103934665603ull;

uint64_t fnv1a(const void *data, size_t n, uint64_t h = kFnvBasis) {
  const unsigned char *p = static_cast<const unsigned char *>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= kFnvPrime;
  }
  return h;
}

/// The pieces' and files' checksum ("fnv1a64x4"): FNV-1a over 64-bit words
/// in four interleaved lanes (each word xored in and multiplied by the FNV
/// prime, an odd number: a changed word always changes its lane), the tail
/// bytes and the length FNV-1a'd into the lanes' combination. Several GB/s
/// on one core, so that checking costs little beside the disk.
uint64_t checksum(const void *data, size_t n) {
  const unsigned char *p = static_cast<const unsigned char *>(data);
  uint64_t lane[4] = {kFnvBasis, kFnvBasis ^ 1, kFnvBasis ^ 2, kFnvBasis ^ 3};
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * k, 8);
      lane[k] = (lane[k] ^ w) * kFnvPrime;
    }
  uint64_t h = fnv1a(lane, sizeof(lane));
  h = fnv1a(p + i, n - i, h);
  const uint64_t len = n;
  return fnv1a(&len, sizeof(len), h);
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string errnoText() { return std::strerror(errno); }

/// Writes `bytes` to `path` and fsyncs it; false with `error`.
bool writeSynced(const std::string &path, const std::vector<std::string_view> &parts,
                 std::string &error) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    error = "cannot create " + path + ": " + errnoText();
    return false;
  }
  for (std::string_view part : parts) {
    const char *p = part.data();
    size_t left = part.size();
    while (left > 0) {
      const ssize_t n = ::write(fd, p, left);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0) {
        error = "cannot write " + path + ": " + errnoText();
        ::close(fd);
        return false;
      }
      p += n;
      left -= static_cast<size_t>(n);
    }
  }
  if (::fsync(fd) != 0) {
    error = "cannot fsync " + path + ": " + errnoText();
    ::close(fd);
    return false;
  }
  if (::close(fd) != 0) {
    error = "cannot close " + path + ": " + errnoText();
    return false;
  }
  return true;
}

bool syncDirectory(const std::string &path, std::string &error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    error = "cannot fsync the directory " + path + ": " + errnoText();
    if (fd >= 0)
      ::close(fd);
    return false;
  }
  ::close(fd);
  return true;
}

bool readWhole(const std::string &path, std::string &out, std::string &error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = "cannot open " + path + ": " + errnoText();
    return false;
  }
  out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (in.bad()) {
    error = "cannot read " + path;
    return false;
  }
  return true;
}

bool readAt(int fd, int64_t offset, void *to, int64_t bytes) {
  char *p = static_cast<char *>(to);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, p, static_cast<size_t>(bytes), offset);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    p += n;
    bytes -= n;
    offset += n;
  }
  return true;
}

std::string parentOf(const std::string &dir) {
  std::filesystem::path p = std::filesystem::path(dir).lexically_normal();
  if (p.has_filename() == false)
    p = p.parent_path();
  std::filesystem::path parent = p.parent_path();
  return parent.empty() ? "." : parent.string();
}

/// The status every rank ends with: the worst of all (each rank's own
/// error kept; the others told that another rank failed).
mfsdp_status agree(mfsdp_step *step, mfsdp_status mine, const char *what) {
  std::vector<int64_t> lo, hi;
  std::string error;
  if (!step->control->minMax({static_cast<int64_t>(mine)}, lo, hi, error))
    return step->fail(MFSDP_ERROR_COMM, error + " while the ranks agreed on " + what);
  if (mine != MFSDP_OK)
    return mine;
  if (hi[0] != MFSDP_OK)
    return step->fail(static_cast<mfsdp_status>(hi[0]),
                      std::string("another rank failed ") + what +
                          " (its mfsdp_last_error says why)");
  return MFSDP_OK;
}

/// Whether this rank is the first coordinate of every dim that is neither
/// dp_shard nor dp_replicate (a TP rank other than the first holds the
/// same data-parallel state and writes nothing).
bool outerPrimary(const mfsdp_step &st) {
  int64_t stride = 1;
  for (size_t i = st.mesh.size(); i-- > 0;) {
    const MeshDimSpec &d = st.mesh[i];
    const int64_t coord = (st.worldRank / stride) % std::max<int64_t>(d.size, 1);
    if (d.name != "dp_shard" && d.name != "dp_replicate" && coord != 0)
      return false;
    stride *= std::max<int64_t>(d.size, 1);
  }
  return true;
}

/// Whether this rank writes kind `k` of `ps` (one copy of each piece).
bool writes(const mfsdp_step &st, const ParamState &ps, int k, bool primary) {
  if (!primary)
    return false;
  const int32_t replica = k != Master && ps.nsReplica >= 0 ? ps.nsReplica : 0;
  if (st.replicaRank != replica)
    return false;
  const int32_t p = ps.desc.placement;
  if (p != MFSDP_ROW_SHARD && p != MFSDP_OWNER && p != MFSDP_BLOCK_SHARD)
    return st.shardRank == 0;
  return true;
}

float *bufferOf(ParamState &ps, int k) {
  return k == Master ? ps.master : k == ExpAvg ? ps.m : ps.v;
}

const char *placementName(int32_t p) {
  switch (p) {
  case MFSDP_ROW_SHARD:
    return "row_shard";
  case MFSDP_OWNER:
    return "owner";
  case MFSDP_BLOCK_SHARD:
    return "block_shard";
  case MFSDP_REPLICATE:
    return "replicate";
  default:
    return "none";
  }
}

mfsdp_status usableForCheckpoint(mfsdp_step *step, const char *call) {
  if (auto s = step->enter())
    return s;
  for (int32_t u = 0; u < step->plan.num_units; ++u)
    if (step->state[u] != UnitState::Idle)
      return step->fail(MFSDP_ERROR_ORDER,
                        std::string(call) + " during the forward or backward of unit " +
                            std::to_string(u) +
                            ": expected every unit's hooks done (between steps)");
  return MFSDP_OK;
}

/// For the crash tests: MFSDP_CHECKPOINT_KILL=files|index|rename kills
/// this process (SIGKILL, as a crash or a preemption would) at that point
/// of mfsdp_save: after its file is written, after the index is written
/// (before the rename), after the rename (before the parent is fsynced).
void killPoint(const char *stage) {
  const char *at = std::getenv("MFSDP_CHECKPOINT_KILL");
  if (at && std::strcmp(at, stage) == 0)
    ::raise(SIGKILL);
}

std::string fileName(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "rank-%05d.safetensors", rank);
  return buf;
}

} // namespace

mfsdp_status mfsdp::rt::saveCheckpoint(mfsdp_step *step, const char *dir,
                                        const char *user) {
  if (!step || !dir || !*dir)
    return step ? step->fail(MFSDP_ERROR_INVALID,
                             "mfsdp_save: expected a directory name, got none")
                : MFSDP_ERROR_INVALID;
  mfsdp_status local = usableForCheckpoint(step, "mfsdp_save");
  json userJson = json::object();
  if (!local && user && *user) {
    try {
      userJson = json::parse(user);
    } catch (const json::exception &e) {
      local = step->fail(MFSDP_ERROR_INVALID,
                         std::string("mfsdp_save: the user dictionary is not JSON: ") +
                             e.what());
    }
    if (!local && !userJson.is_object())
      local = step->fail(MFSDP_ERROR_INVALID,
                         "mfsdp_save: the user dictionary must be a JSON object, got " +
                             std::string(userJson.type_name()));
  }
  // The ranks agree on the directory (rank 0's, with a fresh id for the
  // temporary one), and rank 0 makes it.
  std::vector<uint8_t> blob;
  const std::string target = dir;
  if (step->control->rank() == 0) {
    std::random_device rd;
    const uint64_t id = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
                        static_cast<uint64_t>(
                            std::chrono::steady_clock::now().time_since_epoch().count());
    const std::string text = hex64(id) + target;
    blob.assign(text.begin(), text.end());
  }
  std::string error;
  if (!step->control->broadcast(blob, error))
    return step->fail(MFSDP_ERROR_COMM, error + " while the ranks agreed on the checkpoint");
  const std::string agreed(blob.begin(), blob.end());
  const std::string id = agreed.substr(0, 16), rank0Dir = agreed.substr(16);
  if (!local && rank0Dir != target)
    local = step->fail(MFSDP_ERROR_INVALID,
                       "mfsdp_save: rank " + std::to_string(step->control->rank()) +
                           " was given the directory '" + target + "' but rank 0 '" +
                           rank0Dir + "': every rank must save the same checkpoint");
  const std::string tmp = target + ".tmp-" + id;
  if (step->control->rank() == 0 && !local) {
    std::error_code ec;
    if (std::filesystem::exists(target, ec))
      local = step->fail(MFSDP_ERROR_INVALID,
                         "mfsdp_save: '" + target +
                             "' exists; a checkpoint is written into a new "
                             "directory (remove it, or save under another name)");
    else if (::mkdir(tmp.c_str(), 0755) != 0)
      local = step->fail(MFSDP_ERROR_IO, "mfsdp_save: cannot create the directory " +
                                             tmp + ": " + errnoText());
  }
  if (auto s = agree(step, local, "making the checkpoint's directory"))
    return s;

  // This rank's pieces: one safetensors tensor each.
  const bool primary = outerPrimary(*step);
  json header = json::object();
  // Each buffer written: on the host backend the runtime's own (its
  // arena is host memory; nothing runs on it during the save), on a device
  // a host copy.
  const bool onHost = step->backend->device().device_type == kDLCPU;
  std::vector<std::vector<float>> copies;
  std::vector<std::string_view> data;
  std::vector<uint64_t> sums; // every piece's checksum, in file order
  int64_t offset = 0;
  int64_t pieces = 0;
  for (size_t i = 0; !local && i < step->params.size(); ++i) {
    ParamState &ps = step->params[i];
    const std::vector<Rect> rects = localRects(*step, ps);
    int64_t area = 0;
    for (const Rect &r : rects)
      area += r.area();
    for (int k : kindsOf(ps.desc.optimizer)) {
      if (!writes(*step, ps, k, primary) || rects.empty())
        continue;
      if (area != ps.localCount) {
        local = step->fail(MFSDP_ERROR_PLAN,
                           "mfsdp_save: '" + ps.name + "' keeps " +
                               std::to_string(ps.localCount) +
                               " elements on this rank but its pieces cover " +
                               std::to_string(area));
        break;
      }
      const float *host = bufferOf(ps, k);
      if (!onHost) {
        copies.emplace_back(static_cast<size_t>(ps.localCount));
        if ((local = step->device(step->backend->copyToHost(copies.back().data(), host,
                                                            ps.localCount),
                                  "copy to the host")))
          break;
        host = copies.back().data();
      }
      for (const Rect &r : rects) {
        const int64_t bytes = r.area() * static_cast<int64_t>(sizeof(float));
        const uint64_t sum = checksum(host + r.at, static_cast<size_t>(bytes));
        sums.push_back(sum);
        const std::string key = ps.name + "/" + kKindNames[k] + "/" +
                                std::to_string(r.r0) + "," + std::to_string(r.c0);
        header[key] = {{"dtype", "F32"},
                       {"shape", {r.r1 - r.r0, r.c1 - r.c0}},
                       {"data_offsets", {offset, offset + bytes}}};
        offset += bytes;
        ++pieces;
        // The piece's place and checksum go into the metadata (strings, as
        // the format wants).
        header["__metadata__"][key] =
            json({{"param", ps.name}, {"kind", kKindNames[k]},
                  {"rows", {r.r0, r.r1}}, {"cols", {r.c0, r.c1}}, {"checksum", hex64(sum)}})
                .dump();
      }
      data.emplace_back(reinterpret_cast<const char *>(host),
                        static_cast<size_t>(ps.localCount) * sizeof(float));
    }
  }
  std::string headerText = header.empty() ? std::string("{}") : header.dump();
  // The data starts 8-byte aligned (the format allows padding with spaces).
  while ((8 + headerText.size()) % 8 != 0)
    headerText.push_back(' ');
  const std::string name = fileName(step->control->rank());
  uint64_t fileSum = 0;
  int64_t fileBytes = 0;
  if (!local) {
    uint8_t len[8];
    const uint64_t n = headerText.size();
    for (int b = 0; b < 8; ++b)
      len[b] = static_cast<uint8_t>(n >> (8 * b));
    std::vector<std::string_view> parts = {
        std::string_view(reinterpret_cast<const char *>(len), 8), headerText};
    // The data: this rank's buffers back to back (each buffer's pieces lie
    // in it contiguous and in the order written, localRects).
    parts.insert(parts.end(), data.begin(), data.end());
    for (std::string_view p : parts)
      fileBytes += static_cast<int64_t>(p.size());
    // The file's checksum: the FNV-1a of the header's checksum and the
    // pieces' in order.
    const uint64_t headerSum = checksum(headerText.data(), headerText.size());
    uint64_t h = fnv1a(&headerSum, sizeof(headerSum));
    for (uint64_t c : sums)
      h = fnv1a(&c, sizeof(c), h);
    fileSum = h;
    if (!writeSynced(tmp + "/" + name, parts, error))
      local = step->fail(MFSDP_ERROR_IO, "mfsdp_save: " + error);
    killPoint("files");
  }
  if (auto s = agree(step, local, "writing its checkpoint file")) {
    if (step->control->rank() == 0) {
      std::error_code ec;
      std::filesystem::remove_all(tmp, ec);
    }
    return s;
  }
  // Rank 0 gathers every file's size and checksum, writes the index last
  // and renames the directory.
  const std::string mine = json({{"file", name},
                                 {"bytes", fileBytes},
                                 {"checksum", hex64(fileSum)},
                                 {"pieces", pieces}})
                               .dump();
  std::vector<std::vector<uint8_t>> all;
  if (!step->control->allGather(std::vector<uint8_t>(mine.begin(), mine.end()), all, error))
    return step->fail(MFSDP_ERROR_COMM, error + " while the ranks listed their files");
  if (step->control->rank() == 0) {
    json index;
    index["format"] = kFormat;
    index["format_version"] = kFormatVersion;
    index["id"] = id;
    index["plan_hash"] = hex64(step->plan.hash);
    index["dp_shard"] = step->plan.dp_shard;
    index["dp_replicate"] = step->plan.dp_replicate;
    index["zero"] = step->plan.zero;
    index["ns_split"] = step->plan.ns_split;
    json mesh = json::array();
    for (const MeshDimSpec &d : step->mesh)
      mesh.push_back({{"name", d.name}, {"size", d.size}});
    index["mesh"] = mesh;
    index["step_count"] = step->steps;
    index["user"] = userJson;
    json params = json::array();
    for (const ParamState &ps : step->params) {
      json kinds = json::array();
      for (int k : kindsOf(ps.desc.optimizer))
        kinds.push_back(kKindNames[k]);
      params.push_back({{"name", ps.name},
                        {"shape", {ps.desc.rows, ps.desc.cols}},
                        {"placement", placementName(ps.desc.placement)},
                        {"optimizer", optimizerName(ps.desc.optimizer)},
                        {"kinds", kinds}});
    }
    index["params"] = params;
    json files = json::array();
    for (const std::vector<uint8_t> &f : all)
      files.push_back(json::parse(std::string(f.begin(), f.end())));
    index["files"] = files;
    const std::string text = index.dump(1) + "\n";
    std::string why;
    const bool written =
        writeSynced(tmp + "/" + kIndex, {text}, why) && syncDirectory(tmp, why);
    if (written)
      killPoint("index");
    if (!written)
      local = step->fail(MFSDP_ERROR_IO, "mfsdp_save: " + why);
    else if (::rename(tmp.c_str(), target.c_str()) != 0)
      local = step->fail(MFSDP_ERROR_IO, "mfsdp_save: cannot rename " + tmp + " to " +
                                             target + ": " + errnoText());
    else if (killPoint("rename"), !syncDirectory(parentOf(target), why))
      local = step->fail(MFSDP_ERROR_IO, "mfsdp_save: " + why);
    if (local) {
      std::error_code ec;
      std::filesystem::remove_all(tmp, ec);
    }
  }
  if (auto s = agree(step, local, "completing the checkpoint"))
    return s;
  return step->finish();
}

namespace {

/// One piece of a checkpoint file, as its header describes it.
struct Piece {
  int file = -1;
  int64_t begin = 0, bytes = 0; // absolute offsets in the file
  Rect rect;
  uint64_t sum = 0;
};

uint64_t parseHex(const std::string &s, bool &ok) {
  ok = s.size() == 16;
  uint64_t v = 0;
  for (char c : s) {
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0)
      ok = false;
    v = v << 4 | static_cast<uint64_t>(d < 0 ? 0 : d);
  }
  return v;
}

} // namespace

mfsdp_status mfsdp::rt::loadCheckpoint(mfsdp_step *step, const char *dir, char *user,
                                        int64_t userSize) {
  if (!step || !dir || !*dir || (user && userSize < 1))
    return step ? step->fail(MFSDP_ERROR_INVALID,
                             "mfsdp_load: expected a directory name, and a user "
                             "buffer of at least 1 byte or NULL")
                : MFSDP_ERROR_INVALID;
  mfsdp_status local = usableForCheckpoint(step, "mfsdp_load");
  const std::string base = dir;
  const std::string indexPath = base + "/" + kIndex;
  std::string text, error;
  json index;
  if (!local && !readWhole(indexPath, text, error))
    local = step->fail(MFSDP_ERROR_IO,
                       "mfsdp_load: " + error +
                           " (no index: not a checkpoint, or one whose save did not finish)");
  if (!local) {
    try {
      index = json::parse(text);
      if (index.value("format", "") != kFormat ||
          index.value("format_version", 0) != kFormatVersion)
        local = step->fail(MFSDP_ERROR_IO, "mfsdp_load: " + indexPath +
                                               " is not an mfsdp checkpoint index of "
                                               "format version " +
                                               std::to_string(kFormatVersion));
    } catch (const json::exception &e) {
      local = step->fail(MFSDP_ERROR_IO,
                         "mfsdp_load: " + indexPath + " is not valid JSON: " + e.what());
    }
  }
  // Every rank reads the same checkpoint: the same index, byte for byte.
  {
    const uint64_t h = local ? 0 : fnv1a(text.data(), text.size());
    std::vector<int64_t> mine = {static_cast<int64_t>(local)};
    for (int part = 0; part < 4; ++part)
      mine.push_back(static_cast<int64_t>((h >> (16 * part)) & 0xffff));
    std::vector<int64_t> lo, hi;
    if (!step->control->minMax(mine, lo, hi, error))
      return step->fail(MFSDP_ERROR_COMM, error + " while the ranks compared checkpoints");
    if (local)
      return local;
    if (hi[0] != MFSDP_OK)
      return step->fail(static_cast<mfsdp_status>(hi[0]),
                        "another rank could not read the checkpoint (its "
                        "mfsdp_last_error says why)");
    for (int part = 1; part <= 4; ++part)
      if (lo[part] != hi[part])
        return step->fail(MFSDP_ERROR_INVALID,
                          "mfsdp_load: the ranks read different checkpoints (their "
                          "index files differ): every rank must load the same one");
  }
  // The model: every parameter of the plan, with its shape and the state
  // its optimizer keeps; nothing the plan lacks.
  std::map<std::string, const json *> saved;
  std::vector<std::string> differences;
  try {
    for (const json &p : index.at("params"))
      saved[p.at("name").get<std::string>()] = &p;
    std::map<std::string, bool> seen;
    for (const ParamState &ps : step->params) {
      auto it = saved.find(ps.name);
      if (it == saved.end()) {
        differences.push_back("'" + ps.name + "' is not in the checkpoint");
        continue;
      }
      seen[ps.name] = true;
      const json &p = *it->second;
      const std::vector<int64_t> shape = p.at("shape").get<std::vector<int64_t>>();
      if (shape != std::vector<int64_t>{ps.desc.rows, ps.desc.cols})
        differences.push_back("'" + ps.name + "' is " + std::to_string(ps.desc.rows) +
                              "x" + std::to_string(ps.desc.cols) +
                              " here but " + p.at("shape").dump() + " in the checkpoint");
      const std::vector<std::string> kinds = p.at("kinds").get<std::vector<std::string>>();
      for (int k : kindsOf(ps.desc.optimizer))
        if (std::find(kinds.begin(), kinds.end(), kKindNames[k]) == kinds.end())
          differences.push_back("'" + ps.name + "' needs its " + kKindNames[k] + " (" +
                                optimizerName(ps.desc.optimizer) +
                                ") but the checkpoint has none (saved with " +
                                p.value("optimizer", std::string("?")) + ")");
    }
    for (const auto &[name, p] : saved)
      if (!seen.count(name))
        differences.push_back("'" + name + "' is in the checkpoint but not in this plan");
  } catch (const json::exception &e) {
    return step->fail(MFSDP_ERROR_IO,
                      std::string("mfsdp_load: a malformed index: ") + e.what());
  }
  if (!differences.empty()) {
    std::string list;
    const size_t shown = std::min<size_t>(differences.size(), 20);
    for (size_t i = 0; i < shown; ++i)
      list += "\n  " + differences[i];
    if (shown < differences.size())
      list += "\n  ... and " + std::to_string(differences.size() - shown) + " more";
    return step->fail(MFSDP_ERROR_PLAN, "mfsdp_load: the checkpoint " + base +
                                            " is of another model (" +
                                            std::to_string(differences.size()) +
                                            " differences):" + list);
  }
  // Every file's pieces (each rank reads the headers; the data only where
  // it needs it).
  std::map<std::string, std::vector<Piece>> pieces; // "name/kind"
  std::vector<int> fds;
  auto closeAll = [&]() {
    for (int fd : fds)
      if (fd >= 0)
        ::close(fd);
  };
  try {
    for (const json &f : index.at("files")) {
      const std::string name = f.at("file").get<std::string>();
      if (name.find('/') != std::string::npos || name.empty() || name[0] == '.')
        throw std::runtime_error("a file name with a path: '" + name + "'");
      const std::string path = base + "/" + name;
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      fds.push_back(fd);
      if (fd < 0)
        throw std::runtime_error("cannot open " + path + ": " + errnoText());
      struct stat sb {};
      if (::fstat(fd, &sb) != 0 || sb.st_size != f.at("bytes").get<int64_t>())
        throw std::runtime_error(path + " has " + std::to_string(sb.st_size) +
                                 " bytes; the index says " + f.at("bytes").dump());
      uint8_t len[8];
      if (!readAt(fd, 0, len, 8))
        throw std::runtime_error("cannot read the header of " + path);
      uint64_t n = 0;
      for (int b = 0; b < 8; ++b)
        n |= static_cast<uint64_t>(len[b]) << (8 * b);
      if (n > static_cast<uint64_t>(sb.st_size) - 8 || n > (uint64_t(1) << 31))
        throw std::runtime_error(path + ": a header of " + std::to_string(n) +
                                 " bytes does not fit the file");
      std::string head(n, '\0');
      if (!readAt(fd, 8, head.data(), static_cast<int64_t>(n)))
        throw std::runtime_error("cannot read the header of " + path);
      const json h = json::parse(head);
      const int64_t dataStart = 8 + static_cast<int64_t>(n);
      if (!h.contains("__metadata__"))
        continue; // a rank that wrote nothing
      for (const auto &[key, value] : h.at("__metadata__").items()) {
        const json meta = json::parse(value.get<std::string>());
        const json &t = h.at(key);
        if (t.at("dtype") != "F32")
          throw std::runtime_error(path + ": '" + key + "' is " + t.at("dtype").dump() +
                                   "; expected F32");
        Piece piece;
        piece.file = static_cast<int>(fds.size()) - 1;
        const std::vector<int64_t> off = t.at("data_offsets").get<std::vector<int64_t>>();
        const std::vector<int64_t> rows = meta.at("rows").get<std::vector<int64_t>>();
        const std::vector<int64_t> cols = meta.at("cols").get<std::vector<int64_t>>();
        if (off.size() != 2 || rows.size() != 2 || cols.size() != 2)
          throw std::runtime_error(path + ": '" + key + "' has a malformed place");
        piece.rect = {rows[0], rows[1], cols[0], cols[1], 0};
        piece.begin = dataStart + off[0];
        piece.bytes = off[1] - off[0];
        if (off[0] < 0 || piece.bytes != piece.rect.area() * 4 || rows[0] < 0 ||
            cols[0] < 0 || rows[1] <= rows[0] || cols[1] <= cols[0] ||
            piece.begin + piece.bytes > sb.st_size)
          throw std::runtime_error(path + ": '" + key + "' has a malformed place");
        bool ok = false;
        piece.sum = parseHex(meta.at("checksum").get<std::string>(), ok);
        if (!ok)
          throw std::runtime_error(path + ": '" + key + "' has a malformed checksum");
        pieces[meta.at("param").get<std::string>() + "/" +
               meta.at("kind").get<std::string>()]
            .push_back(piece);
      }
    }
  } catch (const std::exception &e) {
    closeAll();
    fds.clear();
    local = step->fail(MFSDP_ERROR_IO, std::string("mfsdp_load: ") + e.what());
  }
  // The pieces this rank will read: asked of the kernel at once, so that
  // the disk reads ahead of the checks and copies below.
  auto overlapsAny = [](const Rect &piece, const std::vector<Rect> &rects) {
    for (const Rect &r : rects)
      if (piece.r0 < r.r1 && r.r0 < piece.r1 && piece.c0 < r.c1 && r.c0 < piece.c1)
        return true;
    return false;
  };
  for (size_t i = 0; !local && i < step->params.size(); ++i) {
    ParamState &ps = step->params[i];
    const std::vector<Rect> rects = localRects(*step, ps);
    for (int k : kindsOf(ps.desc.optimizer))
      for (const Piece &piece : pieces[ps.name + "/" + kKindNames[k]])
        if (overlapsAny(piece.rect, rects))
          ::posix_fadvise(fds[piece.file], piece.begin, piece.bytes, POSIX_FADV_WILLNEED);
  }
  // What this rank keeps, from the pieces that overlap it.
  for (size_t i = 0; !local && i < step->params.size(); ++i) {
    ParamState &ps = step->params[i];
    const std::vector<Rect> rects = localRects(*step, ps);
    if (rects.empty() || ps.localCount == 0)
      continue;
    for (int k : kindsOf(ps.desc.optimizer)) {
      // Every element is written below (the coverage is checked).
      std::unique_ptr<float[]> hostBuffer(new float[static_cast<size_t>(ps.localCount)]);
      float *const host = hostBuffer.get();
      int64_t covered = 0;
      const std::vector<Piece> &list = pieces[ps.name + "/" + kKindNames[k]];
      std::vector<float> buf;
      for (const Piece &piece : list) {
        if (!overlapsAny(piece.rect, rects))
          continue;
        // A piece that is one of this rank's rectangles (the same layout
        // wrote it) is read in place; others through `buf`.
        const Rect *same = nullptr;
        for (const Rect &r : rects)
          if (r.r0 == piece.rect.r0 && r.r1 == piece.rect.r1 && r.c0 == piece.rect.c0 &&
              r.c1 == piece.rect.c1)
            same = &r;
        float *into = host + (same ? same->at : 0);
        if (!same) {
          buf.resize(static_cast<size_t>(piece.rect.area()));
          into = buf.data();
        }
        if (!readAt(fds[piece.file], piece.begin, into, piece.bytes)) {
          local = step->fail(MFSDP_ERROR_IO, "mfsdp_load: cannot read '" + ps.name +
                                                 "' (" + kKindNames[k] + ") from " +
                                                 index["files"][piece.file]["file"]
                                                     .get<std::string>());
          break;
        }
        if (checksum(into, static_cast<size_t>(piece.bytes)) != piece.sum) {
          local = step->fail(MFSDP_ERROR_IO,
                             "mfsdp_load: '" + ps.name + "' (" + kKindNames[k] +
                                 ", rows " + std::to_string(piece.rect.r0) + ".." +
                                 std::to_string(piece.rect.r1) + ") in " +
                                 index["files"][piece.file]["file"].get<std::string>() +
                                 " does not match its checksum: the file is damaged");
          break;
        }
        if (same) {
          covered += piece.rect.area();
          continue;
        }
        const int64_t pw = piece.rect.c1 - piece.rect.c0;
        for (const Rect &r : rects) {
          const int64_t r0 = std::max(r.r0, piece.rect.r0), r1 = std::min(r.r1, piece.rect.r1);
          const int64_t c0 = std::max(r.c0, piece.rect.c0), c1 = std::min(r.c1, piece.rect.c1);
          if (r0 >= r1 || c0 >= c1)
            continue;
          const int64_t w = r.c1 - r.c0;
          for (int64_t row = r0; row < r1; ++row)
            std::memcpy(host + r.at + (row - r.r0) * w + (c0 - r.c0),
                        buf.data() + (row - piece.rect.r0) * pw + (c0 - piece.rect.c0),
                        static_cast<size_t>(c1 - c0) * sizeof(float));
          covered += (r1 - r0) * (c1 - c0);
        }
      }
      if (local)
        break;
      if (covered != ps.localCount) {
        local = step->fail(MFSDP_ERROR_IO,
                           "mfsdp_load: the checkpoint's pieces of '" + ps.name + "' (" +
                               kKindNames[k] + ") cover " + std::to_string(covered) +
                               " of the " + std::to_string(ps.localCount) +
                               " elements this rank keeps (a file is missing or "
                               "pieces overlap)");
        break;
      }
      if ((local = step->device(
               step->backend->copyFromHost(bufferOf(ps, k), host, ps.localCount),
               "copy from the host")))
        break;
    }
  }
  closeAll();
  if (!local) {
    // The compute copies follow the loaded masters.
    for (ParamState &ps : step->params)
      step->releaseFull(ps);
    if (step->plan.zero < 3)
      for (int32_t u = 0; !local && u < step->plan.num_units; ++u)
        local = step->gather(u);
  }
  if (!local && user) {
    const std::string u = index.value("user", json::object()).dump();
    if (static_cast<int64_t>(u.size()) + 1 > userSize)
      local = step->fail(MFSDP_ERROR_INVALID,
                         "mfsdp_load: the user dictionary takes " +
                             std::to_string(u.size() + 1) + " bytes; the buffer has " +
                             std::to_string(userSize));
    else
      std::memcpy(user, u.c_str(), u.size() + 1);
  }
  if (auto s = agree(step, local, "loading the checkpoint"))
    return s;
  step->steps = index.value("step_count", int64_t(0));
  return step->finish();
}
