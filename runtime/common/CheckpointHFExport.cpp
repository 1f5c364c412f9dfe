//===- CheckpointHFExport.cpp - mfsdp_export_hf: Hugging Face weights out -===//
//
// Writes the model as Hugging Face safetensors weights, in the names of the
// plan's parameter table (HF's, for a plan built from an HF config or by
// the torch package): `model.safetensors`, or shards
// `model-0000k-of-0000n.safetensors` with `model.safetensors.index.json`
// when the weights pass the shard size. Every parameter is gathered whole
// from its fp32 masters, one at a time (collective); rank 0 writes it, in
// fp32 or rounded to bf16 (round to nearest even, as torch's `.to`). The
// matrices a plan holds transformers 5's fused experts as
// (`experts.gate_up_proj.{e}.gate`/`.up`, `experts.down_proj.{e}`) are
// written as the fused 3-D tensors the model has in memory, which
// from_pretrained loads as they are. A tensor whose table row has one
// column is written 1-D, every other 2-D (the table flattens the dims
// after the first). Tied aliases have no row: the tensor is written once,
// under the name that holds it, as save_pretrained does. Atomic as a
// checkpoint: written into dir.tmp-ID, fsynced, renamed.
//
//===----------------------------------------------------------------------===//
#include "CheckpointCommon.h"

#include "mfsdp/runtime/ControlPlane.h"
#include "mfsdp/runtime/Kernels.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

using namespace mfsdp::rt;
using namespace mfsdp::rt::ckpt;
using json = nlohmann::json;

namespace {

/// One tensor of the export: its name and shape, and the parameters whose
/// rows it is made of (each at a row of the tensor seen as [rows, cols]).
struct OutTensor {
  std::string name;
  std::vector<int64_t> shape;
  int64_t elements = 0;
  std::vector<std::pair<int32_t, int64_t>> parts; // (param, first row)
  int file = 0;
  int64_t offset = 0; // in the file's data
};

/// The tensors of the export in table order (a fused tensor where its
/// first matrix is), with every fused tensor complete: every expert from
/// 0, both halves of gate_up_proj, all of one shape; otherwise its
/// matrices are written as they are.
std::vector<OutTensor> tensorsOf(const mfsdp_step &st) {
  struct Fused {
    std::map<int64_t, std::map<int, int32_t>> experts; // e -> half (-1, 0, 1) -> param
    bool halves = false;
    size_t at = 0; // its place in `out`
  };
  std::map<std::string, Fused> fused;
  std::vector<OutTensor> out;
  std::vector<bool> taken(st.params.size(), false);
  for (size_t i = 0; i < st.params.size(); ++i) {
    const std::string &name = st.params[i].name;
    std::string prefix, tail, stem;
    int64_t e = 0;
    int half = -2;
    if (expertMatrixName(name, "gate_up_proj", prefix, e, tail) &&
        (tail == "gate" || tail == "up")) {
      half = tail == "gate" ? 0 : 1;
      stem = prefix + ".experts.gate_up_proj";
    } else if (expertMatrixName(name, "down_proj", prefix, e, tail) && tail.empty()) {
      half = -1;
      stem = prefix + ".experts.down_proj";
    }
    if (half == -2)
      continue;
    Fused &f = fused[stem];
    if (f.experts.empty())
      f.at = i;
    f.halves = half >= 0;
    f.experts[e][half] = static_cast<int32_t>(i);
  }
  std::map<size_t, std::string> fusedAt; // first param -> fused name
  for (auto &[stem, f] : fused) {
    const int64_t experts = static_cast<int64_t>(f.experts.size());
    bool whole = f.experts.rbegin()->first == experts - 1;
    int64_t rows = -1, cols = -1;
    for (const auto &[e, halves] : f.experts) {
      whole &= halves.size() == (f.halves ? 2u : 1u);
      for (const auto &[h, p] : halves) {
        whole &= (h >= 0) == f.halves;
        const mfsdp_param_desc &d = st.params[p].desc;
        if (rows < 0) {
          rows = d.rows;
          cols = d.cols;
        }
        whole &= d.rows == rows && d.cols == cols;
      }
    }
    if (!whole)
      continue;
    OutTensor t;
    t.name = stem;
    const int64_t perExpert = f.halves ? 2 * rows : rows;
    t.shape = {experts, perExpert, cols};
    t.elements = experts * perExpert * cols;
    for (const auto &[e, halves] : f.experts)
      for (const auto &[h, p] : halves) {
        t.parts.push_back({p, e * perExpert + (h == 1 ? rows : 0)});
        taken[static_cast<size_t>(p)] = true;
      }
    fusedAt[f.at] = stem;
    out.push_back(std::move(t));
  }
  std::vector<OutTensor> ordered;
  std::map<std::string, size_t> fusedIndex;
  for (size_t k = 0; k < out.size(); ++k)
    fusedIndex[out[k].name] = k;
  for (size_t i = 0; i < st.params.size(); ++i) {
    if (auto it = fusedAt.find(i); it != fusedAt.end()) {
      ordered.push_back(out[fusedIndex[it->second]]);
      continue;
    }
    if (taken[i])
      continue;
    const mfsdp_param_desc &d = st.params[i].desc;
    OutTensor t;
    t.name = st.params[i].name;
    t.shape = d.cols == 1 ? std::vector<int64_t>{d.rows} : std::vector<int64_t>{d.rows, d.cols};
    t.elements = d.rows * d.cols;
    t.parts.push_back({static_cast<int32_t>(i), 0});
    ordered.push_back(std::move(t));
  }
  return ordered;
}

bool writeAt(int fd, int64_t offset, const void *data, int64_t bytes) {
  const char *p = static_cast<const char *>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd, p, static_cast<size_t>(bytes), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    p += n;
    offset += n;
    bytes -= n;
  }
  return true;
}

} // namespace

mfsdp_status mfsdp::rt::exportHF(mfsdp_step *step, const char *dir, int32_t dtype,
                                 int64_t maxShardBytes) {
  if (!step || !dir || !*dir)
    return step ? step->fail(MFSDP_ERROR_INVALID,
                             "mfsdp_export_hf: expected a directory name")
                : MFSDP_ERROR_INVALID;
  mfsdp_status local = usableForCheckpoint(step, "mfsdp_export_hf");
  if (!local && dtype != MFSDP_COMPUTE_F32 && dtype != MFSDP_COMPUTE_BF16)
    local = step->fail(MFSDP_ERROR_INVALID,
                       "mfsdp_export_hf: dtype " + std::to_string(dtype) +
                           " is not MFSDP_COMPUTE_F32 (0) or MFSDP_COMPUTE_BF16");
  if (!local && maxShardBytes < 0)
    local = step->fail(MFSDP_ERROR_INVALID,
                       "mfsdp_export_hf: max_shard_bytes " + std::to_string(maxShardBytes) +
                           " is negative (0: one file)");
  const std::string target = dir;
  std::string id, tmp;
  if (auto s = newDirectory(step, local, target, "mfsdp_export_hf", "HF export", id, tmp))
    return s;
  const bool root = step->control->rank() == 0;
  const int64_t esize = dtype == MFSDP_COMPUTE_BF16 ? 2 : 4;
  const char *dtypeName = dtype == MFSDP_COMPUTE_BF16 ? "BF16" : "F32";

  // The files: tensors in table order, a new file when the next tensor
  // would take the current one past the shard size.
  std::vector<OutTensor> tensors = tensorsOf(*step);
  std::vector<int64_t> fileBytes(1, 0);
  for (OutTensor &t : tensors) {
    const int64_t bytes = t.elements * esize;
    if (maxShardBytes > 0 && fileBytes.back() > 0 && fileBytes.back() + bytes > maxShardBytes)
      fileBytes.push_back(0);
    t.file = static_cast<int>(fileBytes.size()) - 1;
    t.offset = fileBytes.back();
    fileBytes.back() += bytes;
  }
  const int files = static_cast<int>(fileBytes.size());
  auto fileName = [&](int f) {
    if (files == 1)
      return std::string("model.safetensors");
    char buf[64];
    std::snprintf(buf, sizeof(buf), "model-%05d-of-%05d.safetensors", f + 1, files);
    return std::string(buf);
  };
  // Rank 0 writes each file's header, then every tensor's data at its
  // place as its parameters are gathered.
  std::vector<int> fds(static_cast<size_t>(files), -1);
  std::vector<int64_t> dataStart(static_cast<size_t>(files), 0);
  auto closeAll = [&]() {
    for (int &fd : fds)
      if (fd >= 0) {
        ::close(fd);
        fd = -1;
      }
  };
  if (root) {
    for (int f = 0; f < files && !local; ++f) {
      json header = json::object();
      header["__metadata__"] = {{"format", "pt"}};
      for (const OutTensor &t : tensors)
        if (t.file == f)
          header[t.name] = {{"dtype", dtypeName},
                            {"shape", t.shape},
                            {"data_offsets", {t.offset, t.offset + t.elements * esize}}};
      std::string text = header.dump();
      while ((8 + text.size()) % 8 != 0)
        text.push_back(' ');
      uint8_t len[8];
      for (int b = 0; b < 8; ++b)
        len[b] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * b));
      const std::string path = tmp + "/" + fileName(f);
      fds[f] = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      dataStart[f] = 8 + static_cast<int64_t>(text.size());
      if (fds[f] < 0 || !writeAt(fds[f], 0, len, 8) ||
          !writeAt(fds[f], 8, text.data(), static_cast<int64_t>(text.size())))
        local = step->fail(MFSDP_ERROR_IO,
                           "mfsdp_export_hf: cannot write " + path + ": " + errnoText());
    }
  }
  // Every rank takes part in every gather, whatever rank 0's state: the
  // ranks agree only at the end, so none waits in a gather the others
  // skipped.
  std::vector<float> whole;
  std::vector<uint16_t> half;
  for (const OutTensor &t : tensors) {
    for (const auto &[param, firstRow] : t.parts) {
      ParamState &ps = step->params[static_cast<size_t>(param)];
      whole.resize(static_cast<size_t>(ps.elements()));
      bool collectivesDone = false;
      // Agreed before the gathers: a staging buffer one rank cannot place
      // fails this tensor on every rank (none waits in its gather).
      if (mfsdp_status s = step->storeWhole(ps, ps.master, whole.data(), MFSDP_OK, -1,
                                            &collectivesDone)) {
        if (collectivesDone) {
          // This rank's own failure (its copy to the host), after the
          // collectives: it goes on with the others' gathers and says so
          // when they agree at the end.
          if (!local)
            local = s;
          continue;
        }
        closeAll(); // a collective failed: every rank sees it
        if (root) {
          std::error_code ec;
          std::filesystem::remove_all(tmp, ec); // nothing half-written left
        }
        return s;
      }
      if (!root || local)
        continue;
      const void *data = whole.data();
      if (esize == 2) {
        half.resize(whole.size());
        host::castF32ToBF16(whole.data(), half.data(), static_cast<int64_t>(whole.size()));
        data = half.data();
      }
      const int64_t at = dataStart[t.file] + t.offset + firstRow * ps.desc.cols * esize;
      if (!writeAt(fds[t.file], at, data, ps.elements() * esize))
        local = step->fail(MFSDP_ERROR_IO, "mfsdp_export_hf: cannot write '" + t.name +
                                               "' to " + tmp + "/" + fileName(t.file) +
                                               ": " + errnoText());
    }
  }
  // Every rank's part done (its gathers and, on rank 0, the writes) before
  // rank 0 commits the directory: a failure anywhere leaves none.
  if (auto s = agree(step, local, "exporting the HF weights")) {
    closeAll();
    if (root) {
      std::error_code ec;
      std::filesystem::remove_all(tmp, ec);
    }
    return s;
  }
  if (root) {
    for (int f = 0; f < files && !local; ++f)
      if (::fsync(fds[f]) != 0)
        local = step->fail(MFSDP_ERROR_IO, "mfsdp_export_hf: cannot fsync " + tmp + "/" +
                                               fileName(f) + ": " + errnoText());
    if (!local && files > 1) {
      json index;
      int64_t total = 0;
      for (int64_t b : fileBytes)
        total += b;
      index["metadata"] = {{"total_size", total}};
      json map = json::object();
      for (const OutTensor &t : tensors)
        map[t.name] = fileName(t.file);
      index["weight_map"] = map;
      std::string why;
      if (!writeSynced(tmp + "/model.safetensors.index.json", {index.dump(2) + "\n"}, why))
        local = step->fail(MFSDP_ERROR_IO, "mfsdp_export_hf: " + why);
    }
    std::string why;
    if (!local && !syncDirectory(tmp, why))
      local = step->fail(MFSDP_ERROR_IO, "mfsdp_export_hf: " + why);
    else if (!local && ::rename(tmp.c_str(), target.c_str()) != 0)
      local = step->fail(MFSDP_ERROR_IO, "mfsdp_export_hf: cannot rename " + tmp + " to " +
                                             target + ": " + errnoText());
    else if (!local && !syncDirectory(parentOf(target), why))
      local = step->fail(MFSDP_ERROR_IO, "mfsdp_export_hf: " + why);
  }
  closeAll();
  if (root && local) {
    std::error_code ec;
    std::filesystem::remove_all(tmp, ec);
  }
  if (auto s = agree(step, local, "completing the HF export"))
    return s;
  return step->finish();
}
