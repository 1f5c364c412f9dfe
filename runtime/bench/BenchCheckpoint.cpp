//===- BenchCheckpoint.cpp - Checkpoints against the disk -----------------===//
//
// `mfsdp-bench-runtime checkpoint` (RuntimeBench.cpp).
//
//===----------------------------------------------------------------------===//
#include "Bench.h"

namespace mfsdp::bench {

//===-- Checkpoints on disk against the disk's own bandwidth ---------------===//

/// Writes `bytes` to `path` with write() and fsync(), then drops its pages
/// from the page cache (so that a read comes from the disk); seconds.
double writeFileSynced(const std::string &path, const std::vector<char> &bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    die("cannot create the bandwidth file");
  const double t0 = now();
  size_t at = 0;
  while (at < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + at, bytes.size() - at);
    if (n <= 0)
      die("cannot write the bandwidth file");
    at += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0)
    die("cannot fsync the bandwidth file");
  const double t = now() - t0;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  return t;
}

/// Reads `path` whole; seconds.
double readFile(const std::string &path, std::vector<char> &into) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    die("cannot open the bandwidth file");
  const double t0 = now();
  size_t at = 0;
  while (at < into.size()) {
    const ssize_t n = ::pread(fd, into.data() + at, into.size() - at, static_cast<off_t>(at));
    if (n <= 0)
      die("cannot read the bandwidth file");
    at += static_cast<size_t>(n);
  }
  const double t = now() - t0;
  ::close(fd);
  return t;
}

/// Drops the pages of every file in `dir` from the page cache.
void dropPages(const std::string &dir) {
  for (const auto &e : std::filesystem::directory_iterator(dir)) {
    const int fd = ::open(e.path().c_str(), O_RDONLY);
    if (fd >= 0) {
      ::fdatasync(fd);
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      ::close(fd);
    }
  }
}

int benchCheckpoint(int world, int rank, const char *where, int kRounds) {
  const bool root = rank == 0;
  constexpr int32_t kUnits = 8, kPerUnit = 4;
  constexpr int64_t kRows = 1024, kCols = 1024;
  std::vector<std::string> names;
  std::vector<mfsdp_param_desc> descs;
  for (int32_t u = 0; u < kUnits; ++u)
    for (int32_t j = 0; j < kPerUnit; ++j)
      names.push_back("u" + std::to_string(u) + ".w" + std::to_string(j));
  for (int32_t i = 0; i < kUnits * kPerUnit; ++i) {
    mfsdp_param_desc d{};
    d.name = names[i].c_str();
    d.rows = kRows;
    d.cols = kCols;
    d.unit = i / kPerUnit;
    d.placement = MFSDP_ROW_SHARD;
    d.optimizer = MFSDP_OPT_ADAMW;
    descs.push_back(d);
  }
  std::vector<mfsdp_bucket> noBuckets;
  mfsdp_plan plan = zero3Plan(world, kUnits, descs, noBuckets);
  const Planned planned(plan, /*prefetch=*/0);
  mfsdp_step *step = nullptr;
  checkOk(step, mfsdp_create(&plan, &step), "create");
  std::vector<float> init(kRows * kCols);
  for (int32_t i = 0; i < plan.num_params; ++i) {
    fill(init.data(), kRows * kCols, 100 + i, 0.1f);
    checkOk(step, mfsdp_load_param(step, i, init.data()), "load");
  }
  // Every rank's shards of the masters and both AdamW states.
  const int64_t perRank = 3 * int64_t(plan.num_params) * kRows * kCols / world * 4;
  long long pid = ::getpid(); // rank 0's: one directory for all ranks
  MPI_Bcast(&pid, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  const std::string base = std::string(where) + "/mfsdp-bench-checkpoint-" + std::to_string(pid);
  std::vector<char> bytes(static_cast<size_t>(perRank));
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<char>(i * 2654435761u >> 13);
  if (root)
    std::filesystem::create_directories(base);
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<double> saveT, loadT, writeT, readT;
  int64_t checkpointBytes = 0;
  auto slowest = [](double t) {
    double m = 0;
    MPI_Allreduce(&t, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return m;
  };
  for (int round = 0; round < kRounds; ++round) {
    // The disk alone: each rank writes and reads the same bytes in a file
    // of its own, at the same time as the others.
    const std::string raw = base + "/raw-" + std::to_string(rank);
    MPI_Barrier(MPI_COMM_WORLD);
    writeT.push_back(slowest(writeFileSynced(raw, bytes)));
    std::vector<char> back(bytes.size());
    MPI_Barrier(MPI_COMM_WORLD);
    readT.push_back(slowest(readFile(raw, back)));
    if (back != bytes)
      die("the bandwidth file read back differs");
    std::filesystem::remove(raw);
    // The checkpoint.
    const std::string dir = base + "/ck-" + std::to_string(round);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    checkOk(step, mfsdp_save(step, dir.c_str(), "{}"), "save");
    saveT.push_back(slowest(now() - t0));
    if (root) {
      checkpointBytes = 0;
      for (const auto &e : std::filesystem::directory_iterator(dir))
        checkpointBytes += static_cast<int64_t>(e.file_size());
      dropPages(dir);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = now();
    checkOk(step, mfsdp_load(step, dir.c_str(), nullptr, 0), "load");
    loadT.push_back(slowest(now() - t0));
    MPI_Barrier(MPI_COMM_WORLD);
    if (root)
      std::filesystem::remove_all(dir);
  }
  mfsdp_destroy(step);
  if (root) {
    std::filesystem::remove_all(base);
    const double mb = double(checkpointBytes) / 1e6;
    const double rawMb = double(perRank) * world / 1e6;
    const double ws = median(writeT), rs = median(readT), ss = median(saveT),
                 ls = median(loadT);
    std::printf("mfsdp-bench-runtime checkpoint: host backend, %d ranks, into %s\n"
                "%d AdamW matrices %lldx%lld row-sharded (ZeRO-3): masters, exp_avg and "
                "exp_avg_sq, %.1f MB of checkpoint (%.1f MB of data); median of %d "
                "rounds, the slowest rank's time\n",
                world, where, plan.num_params, (long long)kRows, (long long)kCols, mb,
                rawMb, kRounds);
    std::printf("   disk write (write + fsync, every rank its own file)  %8.3f s  "
                "%8.1f MB/s  (range %s s)\n",
                ws, rawMb / ws, range(writeT, 1).c_str());
    std::printf("   mfsdp_save                                           %8.3f s  "
                "%8.1f MB/s  (range %s s)\n",
                ss, mb / ss, range(saveT, 1).c_str());
    std::printf("   disk read (pages dropped first)                      %8.3f s  "
                "%8.1f MB/s  (range %s s)\n",
                rs, rawMb / rs, range(readT, 1).c_str());
    std::printf("   mfsdp_load (pages dropped first)                     %8.3f s  "
                "%8.1f MB/s  (range %s s)\n",
                ls, mb / ls, range(loadT, 1).c_str());
    std::printf("   save / disk write: %.2f of the bandwidth; load / disk read: %.2f\n",
                (mb / ss) / (rawMb / ws), (mb / ls) / (rawMb / rs));
    std::printf("   each round (s): disk write, save, disk read, load\n");
    for (int r = 0; r < kRounds; ++r)
      std::printf("     %d   %.3f  %.3f  %.3f  %.3f\n", r + 1, writeT[r], saveT[r],
                  readT[r], loadT[r]);
  }
  return 0;
}

} // namespace mfsdp::bench
