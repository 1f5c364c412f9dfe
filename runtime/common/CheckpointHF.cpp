//===- CheckpointHF.cpp - mfsdp_load_hf: Hugging Face weights in ----------===//
//
// Starts training from a Hugging Face safetensors model: `model.safetensors`,
// or the shards `model.safetensors.index.json` names. Each parameter of the
// plan is found by name; each rank reads, with pread, only the rows of the
// rectangles it keeps (row shards, owned matrices, block shards, replicated
// tensors), converting F32, BF16 or F16 to its fp32 masters. Optimizer state
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
          ht.begin = dataStart + t.at("data_offsets").at(0).get<int64_t>();
          ht.end = dataStart + t.at("data_offsets").at(1).get<int64_t>();
          if (ht.end > sb.st_size || ht.begin > ht.end)
            throw std::runtime_error(path + ": '" + key + "' lies past the end of the "
                                     "file (" + std::to_string(sb.st_size) +
                                     " bytes): the file is truncated");
          tensors[key] = ht;
        }
      }
    } catch (const std::exception &e) {
      local = step->fail(MFSDP_ERROR_IO, std::string("mfsdp_load_hf: ") + base + ": " +
                                             e.what());
    }
  }
  // Every parameter of the plan, in the files, with its shape and a dtype
  // this loader reads.
  std::string missing;
  for (size_t i = 0; !local && i < step->params.size(); ++i) {
    const ParamState &ps = step->params[i];
    auto it = tensors.find(ps.desc.name);
    if (it == tensors.end()) {
      missing += (missing.empty() ? "" : ", ") + std::string(ps.desc.name);
      continue;
    }
    const HFTensor &t = it->second;
    int64_t numel = 1;
    for (int64_t d : t.shape)
      numel *= d;
    const int64_t esize = t.dtype == "F32" ? 4 : (t.dtype == "BF16" || t.dtype == "F16") ? 2 : 0;
    if (!esize)
      local = step->fail(MFSDP_ERROR_IO, "mfsdp_load_hf: '" + std::string(ps.desc.name) +
                                             "' is " + t.dtype +
                                             "; expected F32, BF16 or F16");
    else if (numel != ps.desc.rows * ps.desc.cols || t.end - t.begin != numel * esize)
      local = step->fail(MFSDP_ERROR_IO,
                         "mfsdp_load_hf: '" + std::string(ps.desc.name) + "' has " +
                             std::to_string(numel) + " elements in " + files[t.file] +
                             "; the plan's is " + std::to_string(ps.desc.rows) + "x" +
                             std::to_string(ps.desc.cols));
  }
  if (!local && !missing.empty())
    local = step->fail(MFSDP_ERROR_IO, "mfsdp_load_hf: " + base +
                                           " lacks the plan's parameters " + missing);
  // Each rank reads the rows of what it keeps.
  for (size_t i = 0; !local && i < step->params.size(); ++i) {
    ParamState &ps = step->params[i];
    const HFTensor &t = tensors.at(ps.desc.name);
    const int64_t esize = t.dtype == "F32" ? 4 : 2;
    const int64_t cols = ps.desc.cols;
    std::vector<float> host(static_cast<size_t>(ps.localCount), 0.f);
    std::vector<uint8_t> row;
    for (const Rect &r : localRects(*step, ps)) {
      const int64_t w = r.c1 - r.c0;
      row.resize(static_cast<size_t>(w * esize));
      for (int64_t rr = r.r0; rr < r.r1 && !local; ++rr) {
        if (!readAt(fds[t.file], t.begin + (rr * cols + r.c0) * esize, row.data(),
                    w * esize)) {
          local = step->fail(MFSDP_ERROR_IO, "mfsdp_load_hf: cannot read '" +
                                                 std::string(ps.desc.name) + "' from " +
                                                 files[t.file] + ": " + errnoText());
          break;
        }
        float *to = host.data() + r.at + (rr - r.r0) * w;
        for (int64_t c = 0; c < w; ++c) {
          if (esize == 4) {
            std::memcpy(to + c, row.data() + 4 * c, 4);
          } else {
            uint16_t v;
            std::memcpy(&v, row.data() + 2 * c, 2);
            to[c] = t.dtype == "BF16" ? host::fromBF16(v) : fromF16(v);
          }
        }
      }
    }
    if (local)
      break;
    for (int k : kindsOf(ps.desc.optimizer)) {
      if (k != Master)
        std::fill(host.begin(), host.end(), 0.f); // a fresh optimizer
      if ((local = step->device(
               step->backend->copyFromHost(bufferOf(ps, k), host.data(), ps.localCount),
               "copy from the host")))
        break;
    }
  }
  closeAll();
  if (!local)
    local = followMasters(step);
  if (auto s = agree(step, local, "loading the HF weights"))
    return s;
  step->steps = 0;
  return step->finish();
}
