//===- CheckpointCommon.cpp - What mfsdp_save and mfsdp_load share --------===//
#include "CheckpointCommon.h"

#include "mfsdp/runtime/ControlPlane.h"

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
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace mfsdp::rt::ckpt {

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

uint64_t fnv1a(const void *data, size_t n, uint64_t h) {
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
  // Writeback is started every kKick bytes (sync_file_range, no wait), so
  // the disk writes while the rest is copied and the file's dirty pages
  // never pile up to where the kernel throttles the writer; the fsync
  // below then finds little left to do.
  constexpr off_t kKick = off_t(8) << 20;
  off_t written = 0, kicked = 0;
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
      written += n;
#ifdef SYNC_FILE_RANGE_WRITE
      if (written - kicked >= kKick) {
        ::sync_file_range(fd, kicked, written - kicked, SYNC_FILE_RANGE_WRITE);
        kicked = written;
      }
#endif
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
  // Each rank's status and, when it failed, its message: every rank then
  // says why (a trainer that stops at its first error need not wait for
  // the failing rank's own output).
  std::vector<uint8_t> blob(4, 0);
  for (int b = 0; b < 4; ++b)
    blob[b] = static_cast<uint8_t>(static_cast<uint32_t>(mine) >> (8 * b));
  if (mine != MFSDP_OK) {
    const std::string why = step->error.substr(0, 1000);
    blob.insert(blob.end(), why.begin(), why.end());
  }
  std::vector<std::vector<uint8_t>> all;
  std::string error;
  if (!step->control->allGather(blob, all, error))
    return step->fail(MFSDP_ERROR_COMM, error + " while the ranks agreed on " + what);
  if (mine != MFSDP_OK)
    return mine;
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].size() < 4)
      continue;
    uint32_t status = 0;
    for (int b = 0; b < 4; ++b)
      status |= static_cast<uint32_t>(all[r][b]) << (8 * b);
    if (status != MFSDP_OK)
      return step->fail(static_cast<mfsdp_status>(status),
                        "rank " + std::to_string(r) + " failed " + what + ": " +
                            std::string(all[r].begin() + 4, all[r].end()));
  }
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
  // The vocabulary's spellings are string literals: NUL-terminated.
  const std::string_view name = enumName(static_cast<mfsdp::Placement>(p));
  return name == "?" ? "none" : name.data();
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

std::string readSafetensorsHeader(int fd, const std::string &path, int64_t fileBytes,
                                  int64_t &dataStart) {
  uint8_t len[8];
  if (fileBytes < 8 || !readAt(fd, 0, len, 8))
    throw std::runtime_error("cannot read the header of " + path);
  uint64_t n = 0;
  for (int b = 0; b < 8; ++b)
    n |= static_cast<uint64_t>(len[b]) << (8 * b);
  if (n > static_cast<uint64_t>(fileBytes) - 8 || n > (uint64_t(1) << 31))
    throw std::runtime_error(path + ": a header of " + std::to_string(n) +
                             " bytes does not fit the file");
  std::string head(n, '\0');
  if (!readAt(fd, 8, head.data(), static_cast<int64_t>(n)))
    throw std::runtime_error("cannot read the header of " + path);
  dataStart = 8 + static_cast<int64_t>(n);
  return head;
}

mfsdp_status commitLoaded(mfsdp_step *step, mfsdp_status local, const std::string &what) {
  if (auto s = agree(step, local, "writing the loaded parameters")) {
    step->stoppedBy = what + " failed while it wrote the parameters (" + step->error +
                      "), which are partly loaded";
    return s;
  }
  if (auto s = agree(step, followMasters(step), "gathering the loaded parameters")) {
    step->stoppedBy = what + " failed while it gathered the loaded parameters (" +
                      step->error + ")";
    return s;
  }
  return MFSDP_OK;
}

mfsdp_status followMasters(mfsdp_step *step) {
  for (ParamState &ps : step->params)
    step->releaseFull(ps);
  mfsdp_status s = MFSDP_OK;
  if (step->plan.zero < 3)
    for (int32_t u = 0; !s && u < step->plan.num_units; ++u)
      s = step->gather(u);
  return s;
}

bool expertMatrixName(const std::string &name, const std::string &kind,
                      std::string &prefix, int64_t &e, std::string &tail) {
  const std::string key = ".experts." + kind + ".";
  const size_t at = name.find(key);
  if (at == std::string::npos)
    return false;
  prefix = name.substr(0, at);
  const std::string rest = name.substr(at + key.size());
  const size_t dot = rest.find('.');
  const std::string digits = rest.substr(0, dot);
  tail = dot == std::string::npos ? "" : rest.substr(dot + 1);
  if (digits.empty() || digits.size() > 9 ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    return false;
  e = std::stoll(digits);
  return true;
}

mfsdp_status newDirectory(mfsdp_step *step, mfsdp_status local, const std::string &target,
                          const char *call, const char *what, std::string &id,
                          std::string &tmp) {
  std::vector<uint8_t> blob;
  if (step->control->rank() == 0) {
    std::random_device rd;
    const uint64_t fresh = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
                           static_cast<uint64_t>(
                               std::chrono::steady_clock::now().time_since_epoch().count());
    const std::string text = hex64(fresh) + target;
    blob.assign(text.begin(), text.end());
  }
  std::string error;
  if (!step->control->broadcast(blob, error))
    return step->fail(MFSDP_ERROR_COMM,
                      error + " while the ranks agreed on the " + what + "'s directory");
  const std::string agreed(blob.begin(), blob.end());
  id = agreed.substr(0, 16);
  const std::string rank0Dir = agreed.substr(16);
  if (!local && rank0Dir != target)
    local = step->fail(MFSDP_ERROR_INVALID,
                       std::string(call) + ": rank " + std::to_string(step->control->rank()) +
                           " was given the directory '" + target + "' but rank 0 '" +
                           rank0Dir + "': every rank must write the same " + what);
  tmp = target + ".tmp-" + id;
  if (step->control->rank() == 0 && !local) {
    std::error_code ec;
    if (std::filesystem::exists(target, ec))
      local = step->fail(MFSDP_ERROR_INVALID,
                         std::string(call) + ": '" + target + "' exists; a " + what +
                             " is written into a new directory (remove it, or write "
                             "under another name)");
    else if (::mkdir(tmp.c_str(), 0755) != 0)
      local = step->fail(MFSDP_ERROR_IO, std::string(call) +
                                             ": cannot create the directory " + tmp +
                                             ": " + errnoText());
  }
  return agree(step, local, (std::string("making the ") + what + "'s directory").c_str());
}

} // namespace mfsdp::rt::ckpt
