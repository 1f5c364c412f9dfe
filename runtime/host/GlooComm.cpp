//===- GlooComm.cpp - Collectives of the host backend over gloo -----------===//
//
// Under torchrun there is no MPI: the host backend's groups are gloo
// contexts over gloo's TCP transport (the library PyTorch's CPU collectives
// use). Each rank creates one device and, per group, a pair per peer (each
// pair listens on a port of its own); the pairs' addresses go to every rank
// in one exchange over the control plane (instead of a gloo store), and
// every rank connects its pairs. Then, per operation:
//
//   all-gather, all-gather-v, all-reduce (on floats, and on doubles for
//     gradient clipping), broadcast, barrier: gloo's own (gloo::allgather,
//     allgatherv, allreduce (ring), broadcast, barrier);
//   the reduce dtype bf16 (16-bit elements holding bf16 bits; this gloo has
//     no bf16 type): the all-reduce is gloo's ring with host::addBF16 as its
//     reduce function, the reduce-scatter(-v) the ring below on 16-bit
//     segments with the same sum;
//   reduce-scatter and reduce-scatter-v: a ring over gloo's point-to-point
//     sends and receives (ringReduceScatter below): this version of gloo
//     has no reduce-scatter in its option-based API, and composing one from
//     an all-reduce would send twice the bytes;
//   broadcastMany: the broadcasts one after another, as one operation.
//
// gloo's collectives block, so each group runs its operations on a worker
// thread of its own, one at a time in the order they were issued (the same
// order on every rank): a started operation proceeds while the caller
// computes, and a blocking one is a started one waited for at once.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/runtime/ControlPlane.h"
#include "mfsdp/runtime/HostComm.h"
#include "mfsdp/runtime/Kernels.h"

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/context.h>
#include <gloo/math.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <type_traits>

namespace mfsdp::rt {

namespace {

using Millis = std::chrono::milliseconds;

/// gloo's slots 0x01..0x08 << 56 are its own collectives'; the ring's are
/// apart from them.
constexpr uint8_t kRingSlotPrefix = 0x40;

/// A gloo context whose pairs mfsdp connected itself (createGlooComms):
/// gloo::Context keeps its device and pairs where only a subclass can
/// set them.
class PairedContext final : public gloo::Context {
public:
  PairedContext(int rank, int size, std::shared_ptr<gloo::transport::Device> device,
                std::shared_ptr<gloo::transport::Context> pairs)
      : gloo::Context(rank, size) {
    device_ = std::move(device);
    transportContext_ = std::move(pairs);
  }
};

/// gloo writes to its sockets without MSG_NOSIGNAL: a write to a peer that
/// died raises SIGPIPE, which would end the trainer (Python ignores it; a
/// C or C++ trainer does not) where it should be an error. So SIGPIPE is
/// blocked in every thread that writes to gloo's sockets: the workers, and
/// gloo's device thread, which inherits the mask of the thread that
/// creates the device. Blocks it in the calling thread while alive; then
/// takes any SIGPIPE the thread raised meanwhile and restores the mask.
class SigpipeBlocked {
public:
  SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeBlocked() {
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE) && !sigismember(&old_, SIGPIPE)) {
      const timespec now = {0, 0};
      sigtimedwait(&pipe_, nullptr, &now);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeBlocked(const SigpipeBlocked &) = delete;
  SigpipeBlocked &operator=(const SigpipeBlocked &) = delete;

private:
  sigset_t pipe_, old_;
};

/// Runs a group's operations one at a time, in the order they were
/// submitted, on a thread of its own. An operation throws (gloo's
/// exceptions) to fail; its future carries that to the waiter.
class Worker {
public:
  Worker() : thread_([this] { loop(); }) {}
  ~Worker() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  std::future<void> submit(std::function<void()> run) {
    std::packaged_task<void()> task(std::move(run));
    std::future<void> done = task.get_future();
    {
      std::lock_guard<std::mutex> lock(m_);
      queue_.push_back(std::move(task));
    }
    cv_.notify_one();
    return done;
  }

private:
  void loop() {
    SigpipeBlocked blocked;
    for (;;) {
      std::packaged_task<void()> task;
      {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty())
          return; // stopping, everything submitted done
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<void()>> queue_;
  bool stopping_ = false;
  std::thread thread_; // last: started once the rest is ready
};

/// 0 when the operation behind `done` succeeded; else 1 with lastError()
/// naming `what` and gloo's reason.
int complete(std::future<void> &done, const std::string &what) {
  try {
    done.get();
    return 0;
  } catch (const std::exception &e) {
    return HostComm::fail(1, "gloo " + what + " failed: " + e.what());
  } catch (...) {
    return HostComm::fail(1, "gloo " + what + " failed");
  }
}

class GlooRequest final : public HostRequest {
public:
  GlooRequest(std::future<void> done, std::string what)
      : done_(std::move(done)), what_(std::move(what)) {}
  ~GlooRequest() override {
    if (done_.valid())
      done_.wait(); // its buffers may be reused next
  }
  int wait() override { return complete(done_, what_); }

private:
  std::future<void> done_;
  std::string what_;
};

/// recv (counts[rank] floats) = this rank's segment of the sum over the
/// ranks of send (the segments of `counts`, one after another), by a ring:
/// in step s (0 .. W-2) rank r sends segment r-s-1 (its own values in step
/// 0, afterwards what it summed in step s-1) to rank r+1 and receives
/// segment r-s-2 from rank r-1, adding its own values; the last step's is
/// its own segment, summed over all ranks. Every rank sends and receives
/// (W-1)/W of the buffer, as in a reduce-scatter; an empty segment is not
/// sent. Segments are summed in ring order starting after their owner.
/// T is float, or uint16_t holding bf16 bits (the reduce dtype bf16), whose
/// sum is host::addBF16.
template <typename T>
void ringReduceScatter(gloo::Context &context, const T *send, T *recv,
                       const std::vector<int64_t> &counts, Millis timeout) {
  const int W = context.size, r = context.rank;
  std::vector<int64_t> offsets(W + 1, 0);
  for (int k = 0; k < W; ++k)
    offsets[k + 1] = offsets[k] + counts[k];
  if (W == 1) {
    if (counts[0] > 0 && recv != send)
      std::memmove(recv, send, sizeof(T) * static_cast<size_t>(counts[0]));
    return;
  }
  const int64_t most = *std::max_element(counts.begin(), counts.end());
  if (most == 0)
    return;
  const size_t bytes = sizeof(T) * static_cast<size_t>(most);
  // The segment arriving, and the two summed last (one may still be on its
  // way to rank r+1 while the next is summed).
  std::vector<T> scratch(3 * static_cast<size_t>(most));
  T *arrived = scratch.data();
  T *summed[2] = {arrived + most, arrived + 2 * most};
  auto in = context.createUnboundBuffer(arrived, bytes);
  std::unique_ptr<gloo::transport::UnboundBuffer> out[2] = {
      context.createUnboundBuffer(summed[0], bytes),
      context.createUnboundBuffer(summed[1], bytes)};
  auto own = context.createUnboundBuffer(const_cast<T *>(send),
                                         sizeof(T) * static_cast<size_t>(offsets[W]));
  const uint64_t slot = gloo::Slot::build(kRingSlotPrefix, 0);
  const int next = (r + 1) % W, prev = (r + W - 1) % W;
  for (int s = 0; s + 1 < W; ++s) {
    const int sending = ((r - s - 1) % W + W) % W;
    const int receiving = ((r - s - 2) % W + W) % W;
    gloo::transport::UnboundBuffer *from = s == 0 ? own.get() : out[(s - 1) % 2].get();
    const size_t sendOffset = s == 0 ? sizeof(T) * static_cast<size_t>(offsets[sending]) : 0;
    const bool sends = counts[sending] > 0;
    if (sends)
      from->send(next, slot, sendOffset, sizeof(T) * static_cast<size_t>(counts[sending]));
    if (counts[receiving] > 0) {
      const int64_t n = counts[receiving];
      in->recv(prev, slot, 0, sizeof(T) * static_cast<size_t>(n));
      in->waitRecv(timeout);
      T *sum = s + 2 == W ? recv : summed[s % 2];
      const T *mine = send + offsets[receiving];
      for (int64_t i = 0; i < n; ++i) {
        if constexpr (std::is_same_v<T, uint16_t>)
          sum[i] = host::addBF16(arrived[i], mine[i]);
        else
          sum[i] = arrived[i] + mine[i];
      }
    }
    // Sent before its buffer is summed into again (two steps on).
    if (sends)
      from->waitSend(timeout);
  }
}

/// gloo's reduce function on bf16 bits: c = a + b, rounded to bf16.
void sumBF16(void *c, const void *a, const void *b, size_t n) {
  auto *out = static_cast<uint16_t *>(c);
  const auto *x = static_cast<const uint16_t *>(a), *y = static_cast<const uint16_t *>(b);
  for (size_t i = 0; i < n; ++i)
    out[i] = host::addBF16(x[i], y[i]);
}

class GlooComm final : public HostComm {
public:
  explicit GlooComm(std::shared_ptr<gloo::Context> context)
      : HostComm(context->rank, context->size), context_(std::move(context)) {}

  // gloo bounds every wait by its context's timeout itself, and a peer that
  // dies closes its connections at once; a timed-out operation throws,
  // which the request turns into an error.
  void setTimeout(int64_t ms) override {
    context_->setTimeout(Millis(ms > 0 ? ms : kCollectiveTimeoutMsDefault));
  }
  bool broken() const override { return false; }

  int allGather(const float *send, float *recv, int64_t count) override {
    return run("allGather", gatherOp(send, recv, count));
  }
  int reduceScatter(const float *send, float *recv, int64_t count) override {
    return run("reduceScatter", reduceScatterOp(send, recv, evenCounts(count)));
  }
  int allReduce(float *buf, int64_t count) override {
    return run("allReduce", allReduceOp(buf, count));
  }
  int allReduce(double *buf, int64_t count) override {
    return run("allReduce", allReduceOp(buf, count));
  }
  int allGatherV(const float *send, float *recv,
                 const std::vector<int64_t> &counts) override {
    if (int rc = checkCounts("allGatherV", counts, 1))
      return rc;
    return run("allGatherV", gatherVOp(send, recv, counts));
  }
  int reduceScatterV(const float *send, float *recv,
                     const std::vector<int64_t> &counts) override {
    if (int rc = checkCounts("reduceScatterV", counts, 1))
      return rc;
    return run("reduceScatterV", reduceScatterOp(send, recv, counts));
  }
  int startAllGather(const float *send, float *recv, int64_t count,
                     HostRequestPtr &out) override {
    return start("allGather", gatherOp(send, recv, count), out);
  }
  int startAllGatherV(const float *send, float *recv, const std::vector<int64_t> &counts,
                      HostRequestPtr &out) override {
    if (int rc = checkCounts("startAllGatherV", counts, 1))
      return rc;
    return start("allGatherV", gatherVOp(send, recv, counts), out);
  }
  int allGather16(const uint16_t *send, uint16_t *recv, const std::vector<int64_t> &counts,
                  HostRequestPtr *out) override {
    if (int rc = checkCounts("allGather16", counts, 1))
      return rc;
    if (!out)
      return run("allGather16", gatherVOp(send, recv, counts));
    return start("allGather16", gatherVOp(send, recv, counts), *out);
  }
  int reduceScatterBF16(const uint16_t *send, uint16_t *recv,
                        const std::vector<int64_t> &counts, HostRequestPtr *out) override {
    if (int rc = checkCounts("reduceScatterBF16", counts, 1))
      return rc;
    if (!out)
      return run("reduceScatterBF16", reduceScatterOp(send, recv, counts));
    return start("reduceScatterBF16", reduceScatterOp(send, recv, counts), *out);
  }
  int allReduceBF16(uint16_t *buf, int64_t count, HostRequestPtr *out) override {
    if (!out)
      return run("allReduceBF16", allReduceOp(buf, count));
    return start("allReduceBF16", allReduceOp(buf, count), *out);
  }
  int startReduceScatter(const float *send, float *recv, int64_t count,
                         HostRequestPtr &out) override {
    return start("reduceScatter", reduceScatterOp(send, recv, evenCounts(count)), out);
  }
  int startReduceScatterV(const float *send, float *recv,
                          const std::vector<int64_t> &counts,
                          HostRequestPtr &out) override {
    if (int rc = checkCounts("startReduceScatterV", counts, 1))
      return rc;
    return start("reduceScatterV", reduceScatterOp(send, recv, counts), out);
  }
  int startAllReduce(float *buf, int64_t count, HostRequestPtr &out) override {
    return start("allReduce", allReduceOp(buf, count), out);
  }
  int broadcast(float *buf, int64_t count, int root) override {
    if (int rc = checkRoot("broadcast", root, 1))
      return rc;
    return run("broadcast", [this, buf, count, root] { broadcastNow(buf, count, root); });
  }
  int broadcastMany(const std::vector<BroadcastPart> &parts) override {
    for (const BroadcastPart &p : parts)
      if (int rc = checkRoot("broadcast", p.root, 1))
        return rc;
    return run("broadcastMany", [this, parts] {
      for (const BroadcastPart &p : parts)
        broadcastNow(p.buf, p.count, p.root);
    });
  }
  int barrier() override {
    return run("barrier", [this] {
      gloo::BarrierOptions opts(context_);
      gloo::barrier(opts);
    });
  }

private:
  using Op = std::function<void()>;

  int run(const char *what, Op op) {
    std::future<void> done = worker_.submit(std::move(op));
    return complete(done, what);
  }
  int start(const char *what, Op op, HostRequestPtr &out) {
    out = std::make_unique<GlooRequest>(worker_.submit(std::move(op)), what);
    return 0;
  }

  std::vector<int64_t> evenCounts(int64_t count) const {
    return std::vector<int64_t>(static_cast<size_t>(size()), count);
  }

  Op gatherOp(const float *send, float *recv, int64_t count) {
    return [this, send, recv, count] {
      if (count <= 0)
        return;
      gloo::AllgatherOptions opts(context_);
      opts.setOutput(recv, static_cast<size_t>(count) * static_cast<size_t>(size()));
      // In place when this rank's values are already where they go.
      if (send != recv + count * rank())
        opts.setInput(const_cast<float *>(send), static_cast<size_t>(count));
      gloo::allgather(opts);
    };
  }

  template <typename T>
  Op gatherVOp(const T *send, T *recv, const std::vector<int64_t> &counts) {
    return [this, send, recv, counts] {
      std::vector<size_t> elements(counts.begin(), counts.end());
      int64_t total = 0, at = 0;
      for (int k = 0; k < size(); ++k) {
        at += k < rank() ? counts[k] : 0;
        total += counts[k];
      }
      if (total == 0)
        return;
      gloo::AllgathervOptions opts(context_);
      opts.setOutput(recv, std::move(elements));
      if (counts[rank()] > 0 && send != recv + at)
        opts.setInput(const_cast<T *>(send), static_cast<size_t>(counts[rank()]));
      gloo::allgatherv(opts);
    };
  }

  template <typename T>
  Op reduceScatterOp(const T *send, T *recv, std::vector<int64_t> counts) {
    return [this, send, recv, counts] {
      ringReduceScatter(*context_, send, recv, counts, context_->getTimeout());
    };
  }

  /// On floats, on doubles (gradient clipping's sums), and on uint16_t
  /// holding bf16 bits (the reduce dtype bf16: gloo has no bf16 type, so
  /// its ring all-reduce runs on 16-bit elements with sumBF16 as reduce
  /// function).
  template <typename T> Op allReduceOp(T *buf, int64_t count) {
    return [this, buf, count] {
      if (count <= 0)
        return;
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(buf, static_cast<size_t>(count));
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      if constexpr (std::is_same_v<T, uint16_t>)
        opts.setReduceFunction(&sumBF16);
      else
        opts.setReduceFunction(
            static_cast<void (*)(void *, const void *, const void *, size_t)>(
                &gloo::sum<T>));
      gloo::allreduce(opts);
    };
  }

  /// On the worker.
  void broadcastNow(float *buf, int64_t count, int root) {
    if (count <= 0)
      return;
    gloo::BroadcastOptions opts(context_);
    opts.setOutput(buf, static_cast<size_t>(count));
    opts.setRoot(root);
    gloo::broadcast(opts);
  }

  std::shared_ptr<gloo::Context> context_;
  Worker worker_; // after the context: stopped (joined) before it goes
};

// The exchange's blob: 1 and, per dim, the address of each of this rank's
// pairs in the order of the peers' coordinates (4 bytes of length,
// little-endian, then gloo's bytes); or 0 and why this rank failed.

void putU32(std::vector<uint8_t> &out, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

/// The addresses of a blob's dim `which` (of `dims`, each with `peers[d]`
/// addresses); false when the blob is malformed.
bool addressesOf(const std::vector<uint8_t> &blob, size_t which,
                 const std::vector<int> &peers, std::vector<std::vector<char>> &out) {
  size_t at = 1;
  for (size_t d = 0; d <= which; ++d) {
    out.clear();
    for (int p = 0; p < peers[d]; ++p) {
      if (blob.size() - at < 4)
        return false;
      uint32_t n = 0;
      for (int i = 0; i < 4; ++i)
        n |= static_cast<uint32_t>(blob[at + i]) << (8 * i);
      at += 4;
      if (blob.size() - at < n)
        return false;
      out.emplace_back(blob.begin() + static_cast<std::ptrdiff_t>(at),
                       blob.begin() + static_cast<std::ptrdiff_t>(at + n));
      at += n;
    }
  }
  return true;
}

} // namespace

bool createGlooComms(const std::vector<MeshDimSpec> &mesh,
                     const std::vector<std::string> &dims, ControlPlane &control,
                     int timeoutMs, std::vector<std::unique_ptr<HostComm>> &out,
                     std::string &error) {
  const int rank = control.rank(), world = control.world();
  const std::string me = "rank " + std::to_string(rank);
  // Every rank's group along each dim: its colour and coordinate, and the
  // group's size.
  std::vector<std::vector<int>> colours(dims.size(), std::vector<int>(world)),
      coords(dims.size(), std::vector<int>(world));
  std::vector<int> sizes(dims.size(), 0);
  for (size_t d = 0; d < dims.size(); ++d) {
    for (int q = 0; q < world; ++q)
      if (!meshGroup(mesh, dims[d], q, world, colours[d][q], coords[d][q], error))
        return false;
    sizes[d] = static_cast<int>(
        std::count(colours[d].begin(), colours[d].end(), colours[d][rank]));
  }

  // The device and a pair per peer of each group. gloo waits five times a
  // pair's timeout for its connection: connecting takes at most timeoutMs.
  const Millis connectTimeout(std::max(1, timeoutMs / 5));
  std::shared_ptr<gloo::transport::Device> device;
  std::vector<std::shared_ptr<gloo::transport::Context>> pairs(dims.size());
  std::vector<uint8_t> blob = {1};
  try {
    gloo::transport::tcp::attr attr;
    const char *ifname = std::getenv("GLOO_SOCKET_IFNAME");
    if (ifname && *ifname)
      attr.iface = ifname;
    else
      attr.hostname = control.localAddress();
    if (attr.iface.empty() && attr.hostname.empty())
      throw std::runtime_error("the gloo collectives need the torchrun bootstrap "
                               "(no address to listen on)");
    {
      SigpipeBlocked blocked; // inherited by gloo's device thread
      device = gloo::transport::tcp::CreateDevice(attr);
    }
    for (size_t d = 0; d < dims.size(); ++d) {
      pairs[d] = device->createContext(coords[d][rank], sizes[d]);
      pairs[d]->setTimeout(connectTimeout);
      for (int p = 0; p < sizes[d]; ++p) {
        if (p == coords[d][rank])
          continue;
        const std::vector<char> address = pairs[d]->createPair(p)->address().bytes();
        putU32(blob, static_cast<uint32_t>(address.size()));
        blob.insert(blob.end(), address.begin(), address.end());
      }
    }
  } catch (const std::exception &e) {
    const std::string why = me + ": cannot create gloo's TCP device and pairs: " + e.what();
    blob.assign(1, 0);
    blob.insert(blob.end(), why.begin(), why.end());
  }
  // Every rank learns every pair's address, and whether a rank failed.
  std::vector<std::vector<uint8_t>> all;
  if (!control.allGather(blob, all, error)) {
    error += " while the ranks exchanged gloo's addresses";
    return false;
  }
  for (int q = 0; q < world; ++q)
    if (all[q].empty() || all[q][0] != 1) {
      error = all[q].empty() ? "rank " + std::to_string(q) + " sent no gloo addresses"
                             : std::string(all[q].begin() + 1, all[q].end());
      return false;
    }

  // Connect each pair to its peer's pair for this rank: of the two, the one
  // with the larger address connects and the other waits to accept. Every
  // rank goes through its groups in order and through each group's peers
  // in rank order, so no two ranks wait for each other.
  std::vector<int> peers(dims.size());
  for (size_t d = 0; d < dims.size(); ++d)
    peers[d] = sizes[d] - 1;
  std::vector<std::unique_ptr<HostComm>> comms;
  for (size_t d = 0; d < dims.size(); ++d) {
    const int mine = coords[d][rank];
    try {
      for (int q = 0; q < world; ++q) {
        if (q == rank || colours[d][q] != colours[d][rank])
          continue;
        std::vector<std::vector<char>> addresses;
        if (!addressesOf(all[q], d, peers, addresses) ||
            addresses.size() != static_cast<size_t>(peers[d])) {
          error = me + ": rank " + std::to_string(q) + " sent malformed gloo addresses";
          return false;
        }
        // Rank q lists its pairs by the peers' coordinates, skipping its own.
        const int peer = coords[d][q];
        pairs[d]->getPair(peer)->connect(addresses[mine < peer ? mine : mine - 1]);
      }
    } catch (const std::exception &e) {
      error = me + ": connecting gloo's pairs of " + dims[d] + " failed within " +
              std::to_string(timeoutMs) + " ms: " + e.what();
      return false;
    }
    pairs[d]->setTimeout(Millis(kCollectiveTimeoutMsDefault));
    auto context = std::make_shared<PairedContext>(mine, sizes[d], device, pairs[d]);
    context->setTimeout(Millis(kCollectiveTimeoutMsDefault));
    comms.push_back(std::make_unique<GlooComm>(std::move(context)));
  }
  out = std::move(comms);
  return true;
}

} // namespace mfsdp::rt
