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
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
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
  if (!step)
    return MFSDP_ERROR_INVALID;
  // A rank's bad arguments are its error, told to the others below (the
  // load is collective: they wait for this rank's answer, not a timeout).
  mfsdp_status local = !dir || !*dir || (user && userSize < 1)
                           ? step->fail(MFSDP_ERROR_INVALID,
                                        "mfsdp_load: expected a directory name, and a user "
                                        "buffer of at least 1 byte or NULL")
                           : MFSDP_OK;
  if (!local)
    local = usableForCheckpoint(step, "mfsdp_load");
  const std::string base = dir ? dir : "";
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
  // Each parameter's own step count (MFSDP_UNUSED_SKIP), where it was
  // saved as differing from the runtime's.
  int64_t stepCount = 0;
  std::vector<int64_t> paramSteps;
  try {
    stepCount = index.value("step_count", int64_t(0));
    paramSteps.assign(step->params.size(), stepCount);
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
      if (p.contains("step_count")) {
        const int64_t own = p.at("step_count").get<int64_t>();
        if (own < 0 || own > stepCount)
          differences.push_back("'" + ps.name + "' has step_count " + std::to_string(own) +
                                "; expected 0 to the checkpoint's " +
                                std::to_string(stepCount));
        paramSteps[&ps - step->params.data()] = own;
      }
      const std::vector<int64_t> shape = p.at("shape").get<std::vector<int64_t>>();
      if (shape != std::vector<int64_t>{ps.desc.rows, ps.desc.cols})
        differences.push_back("'" + ps.name + "' is " + std::to_string(ps.desc.rows) +
                              "x" + std::to_string(ps.desc.cols) +
                              " here but " + p.at("shape").dump() + " in the checkpoint");
      // Another optimizer's state is not this one's, even where the names
      // agree (SGD's momentum buffer is not AdamW's or Muon's moving
      // average): a parameter stepped by another optimizer is refused. (One
      // frozen here takes the weights alone.)
      const std::string savedWith = p.value("optimizer", std::string("?"));
      if (ps.desc.optimizer != MFSDP_OPT_NONE && savedWith != optimizerName(ps.desc.optimizer))
        differences.push_back("'" + ps.name + "' is stepped by " +
                              optimizerName(ps.desc.optimizer) +
                              " here but was saved with " + savedWith);
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
  std::vector<int64_t> fileSizes; // as fstat found them, with fds
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
      fileSizes.push_back(static_cast<int64_t>(sb.st_size));
      int64_t dataStart = 0;
      const json h = json::parse(readSafetensorsHeader(fd, path, sb.st_size, dataStart));
      if (!h.contains("__metadata__"))
        continue; // a rank that wrote nothing (before the save id existed)
      const json &metadata = h.at("__metadata__");
      if (auto it = metadata.find(kCheckpointIdKey); it != metadata.end()) {
        const std::string fileId = it->get<std::string>();
        const std::string indexId = index.value("id", std::string());
        if (fileId != indexId)
          throw std::runtime_error(path + " was written by another save (id " + fileId +
                                   ") than this checkpoint's index (id " + indexId +
                                   "): a file of another checkpoint");
      }
      for (const auto &[key, value] : metadata.items()) {
        if (key == kCheckpointIdKey)
          continue;
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
  // Every file this rank reads from is mapped (read-only, shared with the
  // page cache): the checks read the pieces where the kernel put them, and
  // the commit copies them from there into the runtime's buffers, with no
  // staging copy of the whole state.
  std::vector<std::pair<char *, size_t>> maps(fds.size(), {nullptr, 0});
  auto unmapAll = [&]() {
    for (auto &[at, size] : maps)
      if (at)
        ::munmap(at, size);
    maps.assign(maps.size(), {nullptr, 0});
  };
  auto mapped = [&](int file) -> const char * {
    if (!maps[file].first) {
      const size_t bytes = static_cast<size_t>(fileSizes[file]);
      void *at = bytes ? ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fds[file], 0)
                       : MAP_FAILED;
      if (at == MAP_FAILED)
        return nullptr;
      maps[file] = {static_cast<char *>(at), bytes};
    }
    return maps[file].first;
  };
  auto fileName = [&](int file) {
    return index["files"][file]["file"].get<std::string>();
  };
  auto overlapsAny = [](const Rect &piece, const std::vector<Rect> &rects) {
    for (const Rect &r : rects)
      if (piece.r0 < r.r1 && r.r0 < piece.r1 && piece.c0 < r.c1 && r.c0 < piece.c1)
        return true;
    return false;
  };
  // What each (parameter, kind) this rank keeps reads: the pieces that
  // overlap it.
  struct Need {
    ParamState *ps;
    int kind;
    std::vector<Rect> rects;
    std::vector<const Piece *> pieces;
  };
  std::vector<Need> needs;
  for (size_t i = 0; !local && i < step->params.size(); ++i) {
    ParamState &ps = step->params[i];
    std::vector<Rect> rects = localRects(*step, ps);
    if (rects.empty() || ps.localCount == 0)
      continue;
    for (int k : kindsOf(ps.desc.optimizer)) {
      Need need{&ps, k, rects, {}};
      for (const Piece &piece : pieces[ps.name + "/" + kKindNames[k]])
        if (overlapsAny(piece.rect, rects))
          need.pieces.push_back(&piece);
      needs.push_back(std::move(need));
    }
  }
  // Asked of the kernel at once, so that the disk reads ahead of the
  // checks below.
  for (const Need &need : needs) {
    for (const Piece *piece : need.pieces) {
      const char *at = mapped(piece->file);
      if (!at) {
        local = step->fail(MFSDP_ERROR_IO, "mfsdp_load: cannot map " + fileName(piece->file) +
                                               ": " + errnoText());
        break;
      }
      // madvise wants a page-aligned start.
      const int64_t page = ::sysconf(_SC_PAGESIZE);
      const int64_t from = piece->begin / page * page;
      ::madvise(const_cast<char *>(at) + from,
                static_cast<size_t>(piece->begin + piece->bytes - from), MADV_WILLNEED);
    }
    if (local)
      break;
  }
  // First every piece is checked and the coverage counted; nothing is
  // written into the runtime until every rank has checked all it reads,
  // so a damaged or incomplete checkpoint leaves every rank's state as it
  // was.
  // Coverage element by element: pieces that overlap (two write the same
  // element) are refused, and so, by the count, is a gap.
  std::vector<uint8_t> mask;
  for (const Need &need : needs) {
    if (local)
      break;
    const ParamState &ps = *need.ps;
    int64_t covered = 0;
    mask.assign(static_cast<size_t>(ps.localCount), 0);
    bool overlap = false;
    for (const Piece *piece : need.pieces) {
      const char *data = maps[piece->file].first + piece->begin;
      if (checksum(data, static_cast<size_t>(piece->bytes)) != piece->sum) {
        local = step->fail(MFSDP_ERROR_IO,
                           "mfsdp_load: '" + ps.name + "' (" + kKindNames[need.kind] +
                               ", rows " + std::to_string(piece->rect.r0) + ".." +
                               std::to_string(piece->rect.r1) + ") in " +
                               fileName(piece->file) +
                               " does not match its checksum: the file is damaged");
        break;
      }
      for (const Rect &r : need.rects) {
        const int64_t r0 = std::max(r.r0, piece->rect.r0), r1 = std::min(r.r1, piece->rect.r1);
        const int64_t c0 = std::max(r.c0, piece->rect.c0), c1 = std::min(r.c1, piece->rect.c1);
        if (r0 >= r1 || c0 >= c1)
          continue;
        const int64_t w = r.c1 - r.c0;
        for (int64_t row = r0; row < r1 && !overlap; ++row) {
          uint8_t *at = mask.data() + r.at + (row - r.r0) * w + (c0 - r.c0);
          for (int64_t c = 0; c < c1 - c0; ++c) {
            overlap |= at[c] != 0;
            at[c] = 1;
          }
        }
        covered += (r1 - r0) * (c1 - c0);
      }
      if (overlap) {
        local = step->fail(MFSDP_ERROR_IO,
                           "mfsdp_load: the checkpoint's pieces of '" + ps.name + "' (" +
                               kKindNames[need.kind] + ") overlap (rows " +
                               std::to_string(piece->rect.r0) + ".." +
                               std::to_string(piece->rect.r1) + " in " +
                               fileName(piece->file) + " again): the files' headers are damaged");
        break;
      }
    }
    if (!local && covered != ps.localCount)
      local = step->fail(MFSDP_ERROR_IO,
                         "mfsdp_load: the checkpoint's pieces of '" + ps.name + "' (" +
                             kKindNames[need.kind] + ") cover " + std::to_string(covered) +
                             " of the " + std::to_string(ps.localCount) +
                             " elements this rank keeps (a file is missing or "
                             "pieces overlap)");
  }
  // The user dictionary must fit before anything is loaded: a load that
  // fails leaves the state as it was.
  std::string userText;
  if (!local && user) {
    userText = index.value("user", json::object()).dump();
    if (static_cast<int64_t>(userText.size()) + 1 > userSize)
      local = step->fail(MFSDP_ERROR_INVALID,
                         "mfsdp_load: the user dictionary takes " +
                             std::to_string(userText.size() + 1) +
                             " bytes; the buffer has " + std::to_string(userSize) +
                             " (nothing was loaded)");
  }
  if (auto s = agree(step, local, "checking the checkpoint")) {
    unmapAll();
    closeAll();
    return s;
  }
  // The commit: each buffer from its pieces. A buffer that is one piece
  // (the same layout wrote it) is copied from the mapping as it is; others
  // are assembled on the host first.
  std::vector<float> assembled;
  for (const Need &need : needs) {
    ParamState &ps = *need.ps;
    const float *from = nullptr;
    if (need.rects.size() == 1 && need.pieces.size() == 1 &&
        need.pieces[0]->rect.r0 == need.rects[0].r0 &&
        need.pieces[0]->rect.r1 == need.rects[0].r1 &&
        need.pieces[0]->rect.c0 == need.rects[0].c0 &&
        need.pieces[0]->rect.c1 == need.rects[0].c1 && need.rects[0].at == 0 &&
        need.pieces[0]->begin % static_cast<int64_t>(alignof(float)) == 0) {
      from = reinterpret_cast<const float *>(maps[need.pieces[0]->file].first +
                                             need.pieces[0]->begin);
    } else {
      assembled.resize(static_cast<size_t>(ps.localCount));
      for (const Piece *piece : need.pieces) {
        const char *data = maps[piece->file].first + piece->begin;
        const int64_t pw = piece->rect.c1 - piece->rect.c0;
        for (const Rect &r : need.rects) {
          const int64_t r0 = std::max(r.r0, piece->rect.r0),
                        r1 = std::min(r.r1, piece->rect.r1);
          const int64_t c0 = std::max(r.c0, piece->rect.c0),
                        c1 = std::min(r.c1, piece->rect.c1);
          if (r0 >= r1 || c0 >= c1)
            continue;
          const int64_t w = r.c1 - r.c0;
          for (int64_t row = r0; row < r1; ++row)
            std::memcpy(assembled.data() + r.at + (row - r.r0) * w + (c0 - r.c0),
                        data + ((row - piece->rect.r0) * pw + (c0 - piece->rect.c0)) *
                                   static_cast<int64_t>(sizeof(float)),
                        static_cast<size_t>(c1 - c0) * sizeof(float));
        }
      }
      from = assembled.data();
    }
    if ((local = step->device(
             step->backend->copyFromHost(bufferOf(ps, need.kind), from, ps.localCount),
             "copy from the host")))
      break;
  }
  unmapAll();
  closeAll();
  if (auto s = commitLoaded(step, local, "a load"))
    return s;
  if (user)
    std::memcpy(user, userText.c_str(), userText.size() + 1);
  step->steps = stepCount;
  for (size_t i = 0; i < step->params.size(); ++i)
    step->params[i].steps = paramSteps[i];
  return step->finish();
}
