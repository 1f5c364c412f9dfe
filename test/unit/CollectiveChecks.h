//===- CollectiveChecks.h - What every host collectives layer must do -----===//
//
// The checks of one group's collectives, shared by the MPI layer's test
// (test/mpi/CollectivesTest.cpp, under mpirun) and the gloo layer's
// (test/unit/TorchrunTest.cpp, forked processes with the torchrun
// variables). Every rank fills its buffers from its rank in the group, so
// the expected results are computed in closed form, not by another
// collective; each operation runs blocking and started (its start* variant
// completed by the request's wait), the all-reduce on doubles (which has
// no start* variant) blocking.
//
//===----------------------------------------------------------------------===//
#ifndef MFSDP_TEST_UNIT_COLLECTIVECHECKS_H
#define MFSDP_TEST_UNIT_COLLECTIVECHECKS_H

#include "mfsdp/runtime/HostComm.h"

#include <cmath>
#include <string>
#include <vector>

namespace mfsdp::test {

struct CheckResults {
  int passed = 0;
  std::vector<std::string> failed;
  void expect(bool ok, const std::string &what) {
    if (ok)
      ++passed;
    else
      failed.push_back(what);
  }
};

/// Runs a start* call (`start(request)`) and waits for its request.
template <typename Start>
int startAndWait(Start start) {
  rt::HostRequestPtr request;
  if (int rc = start(request))
    return rc;
  return request->wait();
}

/// Checks every collective of `comm`, the group along mesh dim `dim`
/// (named in the failures).
inline void checkCollectives(rt::HostComm &comm, const std::string &dim,
                             CheckResults &out) {
  using rt::HostComm;
  using rt::HostRequestPtr;
  const int r = comm.rank(), W = comm.size();
  const int64_t n = 5;
  const float rankSum = static_cast<float>(W * (W - 1) / 2);
  // Owners: rank k holds k + 1 values (rank W-1 none when W > 1, to cover
  // an empty chunk).
  std::vector<int64_t> counts(W);
  int64_t total = 0, start = 0;
  for (int k = 0; k < W; ++k) {
    counts[k] = (W > 1 && k == W - 1) ? 0 : k + 1;
    total += counts[k];
    start += k < r ? counts[k] : 0;
  }
  for (bool started : {false, true}) {
    const std::string how = dim + (started ? " started" : "");
    // Each rank's values are distinguishable: 100 * groupRank + i.
    std::vector<float> mine(n), all(n * W);
    for (int64_t i = 0; i < n; ++i)
      mine[i] = static_cast<float>(100 * r + i);
    int rc = started ? startAndWait([&](HostRequestPtr &q) {
      return comm.startAllGather(mine.data(), all.data(), n, q);
    })
                     : comm.allGather(mine.data(), all.data(), n);
    out.expect(rc == 0, how + " allGather: " + HostComm::lastError());
    bool ok = true;
    for (int k = 0; k < W; ++k)
      for (int64_t i = 0; i < n; ++i)
        ok &= all[k * n + i] == static_cast<float>(100 * k + i);
    out.expect(ok, how + " allGather values");

    // Reduce-scatter of full buffers where element j of rank k is k + j.
    std::vector<float> full(n * W), part(n);
    for (int64_t j = 0; j < n * W; ++j)
      full[j] = static_cast<float>(r + j);
    rc = started ? startAndWait([&](HostRequestPtr &q) {
      return comm.startReduceScatter(full.data(), part.data(), n, q);
    })
                 : comm.reduceScatter(full.data(), part.data(), n);
    out.expect(rc == 0, how + " reduceScatter: " + HostComm::lastError());
    ok = true;
    for (int64_t i = 0; i < n; ++i)
      ok &= part[i] == rankSum + static_cast<float>(W) * (r * n + i);
    out.expect(ok, how + " reduceScatter values");

    std::vector<float> buf(n);
    for (int64_t i = 0; i < n; ++i)
      buf[i] = static_cast<float>(r * i);
    rc = started ? startAndWait([&](HostRequestPtr &q) {
      return comm.startAllReduce(buf.data(), n, q);
    })
                 : comm.allReduce(buf.data(), n);
    out.expect(rc == 0, how + " allReduce: " + HostComm::lastError());
    ok = true;
    for (int64_t i = 0; i < n; ++i)
      ok &= buf[i] == rankSum * static_cast<float>(i);
    out.expect(ok, how + " allReduce values");

    std::vector<float> chunk(counts[r] + 1), gathered(total + 1, -1.f);
    for (int64_t i = 0; i < counts[r]; ++i)
      chunk[i] = static_cast<float>(1000 * r + i);
    rc = started ? startAndWait([&](HostRequestPtr &q) {
      return comm.startAllGatherV(chunk.data(), gathered.data(), counts, q);
    })
                 : comm.allGatherV(chunk.data(), gathered.data(), counts);
    out.expect(rc == 0, how + " allGatherV: " + HostComm::lastError());
    ok = gathered[total] == -1.f; // nothing past the total
    int64_t at = 0;
    for (int k = 0; k < W; ++k)
      for (int64_t i = 0; i < counts[k]; ++i)
        ok &= gathered[at++] == static_cast<float>(1000 * k + i);
    out.expect(ok, how + " allGatherV values");

    std::vector<float> grads(total + 1), mineSum(counts[r] + 1, -1.f);
    for (int64_t j = 0; j < total; ++j)
      grads[j] = static_cast<float>(r + 2 * j);
    rc = started ? startAndWait([&](HostRequestPtr &q) {
      return comm.startReduceScatterV(grads.data(), mineSum.data(), counts, q);
    })
                 : comm.reduceScatterV(grads.data(), mineSum.data(), counts);
    out.expect(rc == 0, how + " reduceScatterV: " + HostComm::lastError());
    ok = mineSum[counts[r]] == -1.f; // nothing past this rank's count
    for (int64_t i = 0; i < counts[r]; ++i)
      ok &= mineSum[i] == rankSum + static_cast<float>(W * 2 * (start + i));
    out.expect(ok, how + " reduceScatterV values");
  }

  // Large buffers (several of gloo's 1 MiB segments per rank), started and
  // waited for together: element j of rank k is k + j % 1000, exact in
  // fp32 when summed.
  {
    const int64_t big = 3 * 100003;
    std::vector<int64_t> bigCounts(W);
    int64_t bigTotal = 0, bigStart = 0;
    for (int k = 0; k < W; ++k) {
      bigCounts[k] = (k + 1) * 100003;
      bigTotal += bigCounts[k];
      bigStart += k < r ? bigCounts[k] : 0;
    }
    std::vector<float> sum(big), grads(bigTotal), shard(bigCounts[r]);
    for (int64_t j = 0; j < big; ++j)
      sum[j] = static_cast<float>(r + j % 1000);
    for (int64_t j = 0; j < bigTotal; ++j)
      grads[j] = static_cast<float>(r + j % 1000);
    HostRequestPtr reduced, scattered;
    int rc = comm.startAllReduce(sum.data(), big, reduced);
    rc = rc ? rc : comm.startReduceScatterV(grads.data(), shard.data(), bigCounts, scattered);
    rc = rc ? rc : reduced->wait();
    rc = rc ? rc : scattered->wait();
    out.expect(rc == 0, dim + " large allReduce and reduceScatterV: " + HostComm::lastError());
    bool ok = true;
    for (int64_t j = 0; j < big; ++j)
      ok &= sum[j] == rankSum + static_cast<float>(W * (j % 1000));
    for (int64_t i = 0; i < bigCounts[r]; ++i)
      ok &= shard[i] == rankSum + static_cast<float>(W * ((bigStart + i) % 1000));
    out.expect(ok, dim + " large allReduce and reduceScatterV values");
  }

  // In double (gradient clipping's sums of squares): values no float
  // holds, 1 + r 2^-40, sum exactly W + rankSum 2^-40; and a large buffer
  // (several of gloo's segments), element j of rank k being
  // k + j % 1000 + 2^-30, exact when summed.
  {
    std::vector<double> sums = {1.0 + std::ldexp(double(r), -40), double(r)};
    out.expect(comm.allReduce(sums.data(), 2) == 0,
               dim + " allReduce of doubles: " + HostComm::lastError());
    out.expect(sums[0] == W + std::ldexp(double(rankSum), -40) &&
                   sums[1] == double(rankSum),
               dim + " allReduce of doubles values");
    const int64_t big = 200003;
    std::vector<double> many(big);
    for (int64_t j = 0; j < big; ++j)
      many[j] = r + double(j % 1000) + std::ldexp(1.0, -30);
    out.expect(comm.allReduce(many.data(), big) == 0,
               dim + " large allReduce of doubles: " + HostComm::lastError());
    bool ok = true;
    for (int64_t j = 0; j < big; ++j)
      ok &= many[j] == double(rankSum) + W * (double(j % 1000) + std::ldexp(1.0, -30));
    out.expect(ok, dim + " large allReduce of doubles values");
  }

  // One broadcast from the last rank.
  std::vector<float> one(n + 1, -1.f);
  for (int64_t i = 0; i < n; ++i)
    one[i] = static_cast<float>(10 * r + i);
  out.expect(comm.broadcast(one.data(), n, W - 1) == 0,
             dim + " broadcast: " + HostComm::lastError());
  bool ok = one[n] == -1.f;
  for (int64_t i = 0; i < n; ++i)
    ok &= one[i] == static_cast<float>(10 * (W - 1) + i);
  out.expect(ok, dim + " broadcast values");

  // Several broadcasts at once, each from another root (k mod W) and of
  // another size (k + 1 floats, one empty): every rank ends with each
  // root's values.
  const int parts = 4;
  std::vector<std::vector<float>> bufs(parts);
  std::vector<rt::BroadcastPart> many;
  for (int k = 0; k < parts; ++k) {
    const int64_t count = k == 2 ? 0 : k + 1;
    bufs[k].assign(count + 1, -1.f);
    for (int64_t i = 0; i < count; ++i)
      bufs[k][i] = static_cast<float>(10 * r + 100 * k + i);
    many.push_back({bufs[k].data(), count, k % W});
  }
  out.expect(comm.broadcastMany(many) == 0, dim + " broadcastMany: " + HostComm::lastError());
  ok = true;
  for (int k = 0; k < parts; ++k) {
    const int64_t count = k == 2 ? 0 : k + 1;
    for (int64_t i = 0; i < count; ++i)
      ok &= bufs[k][i] == static_cast<float>(10 * (k % W) + 100 * k + i);
    ok &= bufs[k][count] == -1.f; // nothing past the count
  }
  out.expect(ok, dim + " broadcastMany values");
  // A root out of range is an error on every rank, not a hang.
  std::vector<rt::BroadcastPart> badRoot = {{bufs[0].data(), 1, W}};
  out.expect(comm.broadcastMany(badRoot) != 0 &&
                 std::string(HostComm::lastError()).find("out of range") != std::string::npos,
             dim + " broadcastMany rejects a root out of range");

  // A wrong number of counts is an error, not a crash.
  std::vector<int64_t> wrong(W + 1, 1);
  std::vector<float> sink(W + 2);
  out.expect(comm.allGatherV(sink.data(), sink.data(), wrong) != 0 &&
                 std::string(HostComm::lastError()).find("counts") != std::string::npos,
             dim + " allGatherV rejects a wrong count list");
  out.expect(comm.barrier() == 0, dim + " barrier: " + HostComm::lastError());
}

} // namespace mfsdp::test

#endif // MFSDP_TEST_UNIT_COLLECTIVECHECKS_H
