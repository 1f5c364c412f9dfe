//===- CheckpointLoad.cpp - mfsdp_load: a sharded checkpoint back ---------===//
//
// A load reads, on each rank, the rectangles that overlap what it keeps
// under its own plan, from whatever mesh, placement or ZeRO level wrote
// them (resharding), checking each piece's checksum; the ranks agree on
// the index they read, and a model that differs is an error listing the
// differences (the format: CheckpointFiles.cpp).
//
//===----------------------------------------------------------------------===//
#include "CheckpointCommon.h"

#include "mfsdp/runtime/ControlPlane.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

using namespace mfsdp::rt;
using namespace mfsdp::rt::ckpt;
using json = nlohmann::json;

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
      int64_t dataStart = 0;
      const json h = json::parse(readSafetensorsHeader(fd, path, sb.st_size, dataStart));
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
  if (!local)
    local = followMasters(step);
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
