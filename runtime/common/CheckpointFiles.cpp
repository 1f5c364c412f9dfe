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

#include "CheckpointCommon.h"

using namespace mfsdp::rt::ckpt;

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
  const std::string target = dir;
  std::string id, tmp, error;
  if (auto s = newDirectory(step, local, target, "mfsdp_save", "checkpoint", id, tmp))
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
  // The save's id: a rank file of another checkpoint (copied in by hand)
  // is told apart from this one's by it, whatever its checksums say.
  header["__metadata__"][kCheckpointIdKey] = id;
  std::string headerText = header.dump();
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
  if (!step->control->allGather(std::vector<uint8_t>(mine.begin(), mine.end()), all, error)) {
    if (step->control->rank() == 0) {
      std::error_code ec;
      std::filesystem::remove_all(tmp, ec); // nothing half-written left
    }
    return step->fail(MFSDP_ERROR_COMM, error + " while the ranks listed their files");
  }
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
      // Skipped steps (MFSDP_UNUSED_SKIP): its own count.
      if (ps.steps != step->steps)
        params.back()["step_count"] = ps.steps;
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

