//===- CheckpointHF.cpp - mfsdp_load_hf: Hugging Face weights in ----------===//
//
// Starts training from a Hugging Face safetensors model: `model.safetensors`,
// or the shards `model.safetensors.index.json` names. Each parameter of the
// plan is found by name; each rank reads, with pread, only the rows of the
// rectangles it keeps (row shards, owned matrices, block shards, replicated
// tensors), converting F32, BF16 or F16 to its fp32 masters. The matrices
// a plan holds transformers 5's fused experts as (gate_up_proj [E, 2I, H],
// down_proj [E, H, I]) are read from the per-expert tensors transformers
// writes (`experts.{e}.gate_proj.weight`, Mixtral's `w1`/`w3`/`w2`), or
// from their rows of a fused 3-D tensor. Optimizer state
// starts at zero and the step count at 0. Every problem (a missing tensor,
// another shape, a dtype it cannot read, a file shorter than its header
// says) is an error naming the tensor and the file, on every rank.
//
//===----------------------------------------------------------------------===//
#include "CheckpointCommon.h"

#include "mfsdp/runtime/ControlPlane.h"
#include "mfsdp/runtime/Kernels.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

using namespace mfsdp::rt;
using namespace mfsdp::rt::ckpt;
using json = nlohmann::json;

namespace {

/// One tensor of the model's files.
struct HFTensor {
  int file = -1;
  std::string dtype;
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0; // absolute offsets in the file
};

float fromF16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else { // subnormal: normalise
      exp = 127 - 15 + 1;
      while (!(man & 0x400)) {
        man <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

/// Where a parameter's rows come from: tensor `t`, from row `rowBase` of
/// it seen as [rows, cols] (`fusedName`: the 3-D tensor it is a matrix of).
struct Source {
  const HFTensor *t = nullptr;
  int64_t rowBase = 0;
  std::string fusedName;
};

/// `name` as its tensor of the same shape under the per-expert names of
/// transformers' files (see fusedSource).
bool legacySource(const std::string &name, const mfsdp_param_desc &desc,
                  const std::map<std::string, HFTensor> &tensors, Source &src) {
  auto endsWith = [](const std::string &s, const std::string &t) {
    return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
  };
  std::vector<std::string> candidates;
  // Mixtral's module is `block_sparse_moe` where transformers 5 has `mlp`.
  auto mixtral = [&](const std::string &prefix) {
    return endsWith(prefix, ".mlp")
               ? prefix.substr(0, prefix.size() - 3) + "block_sparse_moe"
               : std::string();
  };
  std::string prefix, tail;
  int64_t expert = 0;
  if (expertMatrixName(name, "gate_up_proj", prefix, expert, tail) &&
      (tail == "gate" || tail == "up")) {
    const std::string e = std::to_string(expert);
    candidates.push_back(prefix + ".experts." + e + "." + tail + "_proj.weight");
    if (std::string m = mixtral(prefix); !m.empty())
      candidates.push_back(m + ".experts." + e + (tail == "gate" ? ".w1" : ".w3") +
                           ".weight");
  } else if (expertMatrixName(name, "down_proj", prefix, expert, tail) && tail.empty()) {
    const std::string e = std::to_string(expert);
    candidates.push_back(prefix + ".experts." + e + ".down_proj.weight");
    if (std::string m = mixtral(prefix); !m.empty())
      candidates.push_back(m + ".experts." + e + ".w2.weight");
  } else if (endsWith(name, ".mlp.gate.weight")) {
    candidates.push_back(name.substr(0, name.size() - 16) + ".block_sparse_moe.gate.weight");
  }
  for (const std::string &c : candidates) {
    auto it = tensors.find(c);
    if (it == tensors.end())
      continue;
    // The expert's matrix as the plan's [rows, cols], not another shape
    // of as many elements (its transpose).
    const std::vector<int64_t> &shape = it->second.shape;
    if (shape.size() != 2 || shape[0] != desc.rows || shape[1] != desc.cols)
      continue;
    src.t = &it->second;
    src.rowBase = 0;
    src.fusedName = c;
    return true;
  }
  return false;
}

/// A matrix of a fused expert tensor: `X.{e}.gate` / `X.{e}.up` are expert
/// e's first and second halves of X [E, 2R, C]'s rows, `X.{e}` expert e's
/// rows of X [E, R, C]; the plan's matrix must be [R, C]. False when
/// `name` is no such matrix of a tensor in `tensors`.
bool fusedSource(const std::string &name, const mfsdp_param_desc &desc,
                 const std::map<std::string, HFTensor> &tensors, Source &src) {
  std::string stem = name;
  int half = -1; // -1: the whole expert; 0: gate; 1: up
  // The names transformers writes fused experts under (save_pretrained
  // converts them back to one tensor per expert and projection): Qwen3-MoE
  // and most MoE models `mlp.experts.{e}.gate_proj.weight` (up_proj,
  // down_proj), Mixtral `block_sparse_moe.experts.{e}.w1.weight` (w3 up,
  // w2 down) and its router `block_sparse_moe.gate.weight`.
  if (legacySource(name, desc, tensors, src))
    return true;
  for (const auto &[suffix, h] : {std::pair<const char *, int>{".gate", 0}, {".up", 1}}) {
    const size_t n = std::strlen(suffix);
    if (stem.size() > n && stem.compare(stem.size() - n, n, suffix) == 0) {
      stem.resize(stem.size() - n);
      half = h;
      break;
    }
  }
  const size_t dot = stem.rfind('.');
  if (dot == std::string::npos || dot + 1 == stem.size())
    return false;
  int64_t e = 0;
  for (size_t k = dot + 1; k < stem.size(); ++k) {
    if (stem[k] < '0' || stem[k] > '9' || e > (int64_t(1) << 40))
      return false;
    e = e * 10 + (stem[k] - '0');
  }
  auto it = tensors.find(stem.substr(0, dot));
  if (it == tensors.end() || it->second.shape.size() != 3)
    return false;
  const std::vector<int64_t> &shape = it->second.shape;
  const int64_t experts = shape[0], rows = shape[1], cols = shape[2];
  const int64_t rowsEach = half < 0 ? rows : rows / 2;
  if (e >= experts || (half >= 0 && rows % 2 != 0) || desc.rows != rowsEach ||
      desc.cols != cols)
    return false;
  src.t = &it->second;
  src.rowBase = e * rows + (half == 1 ? rowsEach : 0);
  src.fusedName = it->first;
  return true;
}

} // namespace

mfsdp_status mfsdp::rt::loadHF(mfsdp_step *step, const char *dir) {
  if (!step || !dir || !*dir)
    return step ? step->fail(MFSDP_ERROR_INVALID,
                             "mfsdp_load_hf: expected a directory name")
                : MFSDP_ERROR_INVALID;
  mfsdp_status local = usableForCheckpoint(step, "mfsdp_load_hf");
  const std::string base = dir;
  std::vector<std::string> files;
  std::vector<int> fds;
  std::map<std::string, HFTensor> tensors;
  auto closeAll = [&]() {
    for (int fd : fds)
      if (fd >= 0)
        ::close(fd);
  };
  if (!local) {
    try {
      std::string text, error;
      if (readWhole(base + "/model.safetensors.index.json", text, error)) {
        const json index = json::parse(text);
        std::map<std::string, bool> seen;
        for (const auto &[name, file] : index.at("weight_map").items()) {
          (void)name;
          const std::string f = file.get<std::string>();
          if (!seen[f]) {
            seen[f] = true;
            files.push_back(f);
          }
        }
      } else {
        files.push_back("model.safetensors");
      }
      for (const std::string &name : files) {
        if (name.find('/') != std::string::npos || name.empty() || name[0] == '.')
          throw std::runtime_error("a file name with a path: '" + name + "'");
        const std::string path = base + "/" + name;
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        fds.push_back(fd);
        if (fd < 0)
          throw std::runtime_error("cannot open " + path + ": " + errnoText());
        struct stat sb {};
        if (::fstat(fd, &sb) != 0 || sb.st_size < 8)
          throw std::runtime_error(path + " is not a safetensors file (too short)");
        int64_t dataStart = 0;
        const json h = json::parse(readSafetensorsHeader(fd, path, sb.st_size, dataStart));
        for (const auto &[key, t] : h.items()) {
          if (key == "__metadata__")
            continue;
          HFTensor ht;
          ht.file = static_cast<int>(fds.size()) - 1;
          ht.dtype = t.at("dtype").get<std::string>();
          ht.shape = t.at("shape").get<std::vector<int64_t>>();
          // Offsets in the data section, which follows the header: a
          // negative one would read the header as weights.
          const int64_t b = t.at("data_offsets").at(0).get<int64_t>();
          const int64_t e = t.at("data_offsets").at(1).get<int64_t>();
          const int64_t data = static_cast<int64_t>(sb.st_size) - dataStart;
          if (b < 0 || e < b)
            throw std::runtime_error(path + ": '" + key + "' has data_offsets [" +
                                     std::to_string(b) + ", " + std::to_string(e) +
                                     "]; expected 0 <= begin <= end");
          if (e > data)
            throw std::runtime_error(path + ": '" + key + "' lies past the end of the "
                                     "file (" + std::to_string(sb.st_size) +
                                     " bytes): the file is truncated");
          ht.begin = dataStart + b;
          ht.end = dataStart + e;
          tensors[key] = ht;
        }
      }
    } catch (const std::exception &e) {
      local = step->fail(MFSDP_ERROR_IO, std::string("mfsdp_load_hf: ") + base + ": " +
                                             e.what());
    }
  }
  // Every parameter of the plan, in the files, with its shape and a dtype
  // this loader reads: a tensor of its name, or, for the matrices of
  // transformers 5's fused experts (`X.{e}.gate` / `X.{e}.up` of
  // gate_up_proj [E, 2I, H], `X.{e}` of down_proj [E, H, I]; see
  // docs/graph-format.md), their rows of the 3-D tensor X.
  std::vector<Source> sources(step->params.size());
  std::string missing;
  for (size_t i = 0; !local && i < step->params.size(); ++i) {
    const ParamState &ps = step->params[i];
    Source &src = sources[i];
    std::string name = ps.desc.name;
    if (auto it = tensors.find(name); it != tensors.end()) {
      src.t = &it->second;
    } else if (!fusedSource(name, ps.desc, tensors, src)) {
      missing += (missing.empty() ? "" : ", ") + name;
      continue;
    } else {
      name = src.fusedName + " (for " + name + ")";
    }
    const HFTensor &t = *src.t;
    int64_t numel = 1;
    for (int64_t d : t.shape)
      numel *= d;
    const int64_t esize = t.dtype == "F32" ? 4 : (t.dtype == "BF16" || t.dtype == "F16") ? 2 : 0;
    // A tensor of the parameter's own name has its shape: the first dim
    // the plan's rows, the others together its columns (a 1-D tensor one
    // column). A fused expert tensor was matched by its shape
    // (fusedSource) and holds more than the parameter.
    bool fits = true;
    if (src.fusedName.empty()) {
      int64_t rest = 1;
      for (size_t k = 1; k < t.shape.size(); ++k)
        rest *= t.shape[k];
      fits = t.shape.empty() ? ps.desc.rows == 1 && ps.desc.cols == 1
                             : t.shape[0] == ps.desc.rows && rest == ps.desc.cols;
    }
    auto shapeText = [](const std::vector<int64_t> &shape) {
      std::string out;
      for (int64_t d : shape)
        out += (out.empty() ? "" : ", ") + std::to_string(d);
      return "[" + out + "]";
    };
    if (!esize)
      local = step->fail(MFSDP_ERROR_IO, "mfsdp_load_hf: '" + name + "' is " + t.dtype +
                                             "; expected F32, BF16 or F16");
    else if (!fits || t.end - t.begin != numel * esize)
      local = step->fail(MFSDP_ERROR_IO,
                         "mfsdp_load_hf: '" + name + "' has " + std::to_string(numel) +
                             " elements (shape " + shapeText(t.shape) + ", " +
                             std::to_string(t.end - t.begin) + " bytes of " + t.dtype +
                             ") in " + files[t.file] + "; the plan's is " +
                             std::to_string(ps.desc.rows) + "x" +
                             std::to_string(ps.desc.cols) +
                             " (its first dim the rows, the others the columns)");
  }
  if (!local && !missing.empty())
    local = step->fail(MFSDP_ERROR_IO, "mfsdp_load_hf: " + base +
                                           " lacks the plan's parameters " + missing);
  // Each rank reads the rows of what it keeps, all of them before any is
  // written into the runtime: a file that fails to read leaves every
  // rank's state as it was. Rows that are whole in the file (a row shard,
  // an owned or replicated matrix) come in one read.
  std::vector<std::vector<float>> loaded(step->params.size());
  std::vector<uint8_t> bytes;
  for (size_t i = 0; !local && i < step->params.size(); ++i) {
    ParamState &ps = step->params[i];
    const HFTensor &t = *sources[i].t;
    const int64_t rowBase = sources[i].rowBase;
    const int64_t esize = t.dtype == "F32" ? 4 : 2;
    const int64_t cols = ps.desc.cols;
    std::vector<float> &host = loaded[i];
    host.assign(static_cast<size_t>(ps.localCount), 0.f);
    auto convert = [&](const uint8_t *from, float *to, int64_t n) {
      for (int64_t c = 0; c < n; ++c) {
        if (esize == 4) {
          std::memcpy(to + c, from + 4 * c, 4);
        } else {
          uint16_t v;
          std::memcpy(&v, from + 2 * c, 2);
          to[c] = t.dtype == "BF16" ? host::fromBF16(v) : fromF16(v);
        }
      }
    };
    for (const Rect &r : localRects(*step, ps)) {
      const int64_t w = r.c1 - r.c0;
      // Whole rows: one read; else one read a row.
      const int64_t rowsAtOnce = w == cols ? r.r1 - r.r0 : 1;
      bytes.resize(static_cast<size_t>(rowsAtOnce * w * esize));
      for (int64_t rr = r.r0; rr < r.r1 && !local; rr += rowsAtOnce) {
        if (!readAt(fds[t.file], t.begin + ((rowBase + rr) * cols + r.c0) * esize,
                    bytes.data(), rowsAtOnce * w * esize)) {
          local = step->fail(MFSDP_ERROR_IO, "mfsdp_load_hf: cannot read '" +
                                                 std::string(ps.desc.name) + "' from " +
                                                 files[t.file] + ": " + errnoText());
          break;
        }
        convert(bytes.data(), host.data() + r.at + (rr - r.r0) * w, rowsAtOnce * w);
      }
    }
  }
  if (auto s = agree(step, local, "reading the HF weights")) {
    closeAll();
    return s;
  }
  for (size_t i = 0; !local && i < step->params.size(); ++i) {
    ParamState &ps = step->params[i];
    std::vector<float> &host = loaded[i];
    for (int k : kindsOf(ps.desc.optimizer)) {
      if (k != Master)
        std::fill(host.begin(), host.end(), 0.f); // a fresh optimizer
      if ((local = step->device(
               step->backend->copyFromHost(bufferOf(ps, k), host.data(), ps.localCount),
               "copy from the host")))
        break;
    }
    std::vector<float>().swap(host);
  }
  closeAll();
  if (auto s = commitLoaded(step, local, "an HF load"))
    return s;
  step->steps = 0;
  for (ParamState &ps : step->params)
    ps.steps = 0;
  return step->finish();
}
