//===- Bootstrap.cpp - Ranks from the torchrun environment ----------------===//
//
// The wire format of broadcastBlob: every non-zero rank connects and sends
// its rank (4 bytes, little-endian); once WORLD_SIZE - 1 ranks have, rank
// 0 closes the port and answers each with the blob's length (8 bytes) and
// the blob. TcpStar's format is described where it is implemented.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/runtime/Bootstrap.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace mfsdp::rt {

EnvLookup processEnvironment() {
  return [](const char *name, std::string &value) {
    const char *v = std::getenv(name);
    if (!v)
      return false;
    value = v;
    return true;
  };
}

namespace {

bool readInt(const EnvLookup &env, const char *name, bool required, long long lo,
             long long hi, long long &out, std::string &error) {
  std::string text;
  if (!env(name, text)) {
    if (required)
      error = std::string(name) + " is not set; a launcher following the "
                                  "torchrun convention sets RANK, WORLD_SIZE, "
                                  "MASTER_ADDR and MASTER_PORT";
    return !required;
  }
  char *end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || errno != 0 || !end || *end) {
    error = std::string(name) + "='" + text + "' is not an integer";
    return false;
  }
  if (v < lo || v > hi) {
    error = std::string(name) + "=" + text + " is out of range; expected " +
            std::to_string(lo) + ".." + std::to_string(hi);
    return false;
  }
  out = v;
  return true;
}

using Clock = std::chrono::steady_clock;

int remainingMs(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0)
    return 0;
  return static_cast<int>(std::min<long long>(left.count(), 1 << 30));
}

/// Waits until `fd` is ready for `events` or the deadline passes: true when
/// ready. A signal (EINTR) does not end the wait early.
bool readyBefore(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd pfd{fd, events, 0};
    int ms = remainingMs(deadline);
    if (ms == 0)
      return false;
    int rc = poll(&pfd, 1, ms);
    if (rc > 0)
      return true;
    if (rc == 0 || errno != EINTR)
      return false;
  }
}

/// Sends or receives exactly n bytes before the deadline.
bool transfer(int fd, void *data, size_t n, bool sending, Clock::time_point deadline) {
  auto *p = static_cast<uint8_t *>(data);
  while (n > 0) {
    if (!readyBefore(fd, sending ? POLLOUT : POLLIN, deadline))
      return false;
    // Never block in the call itself: a peer that stops reading fills the
    // socket buffer, and a blocking send would wait past the deadline.
    ssize_t k = sending ? send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT)
                        : recv(fd, p, n, MSG_DONTWAIT);
    if (k <= 0) {
      if (k < 0 && (errno == EINTR || errno == EAGAIN))
        continue;
      return false;
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

std::string where(const RankEnv &env) {
  return env.masterAddr + ":" + std::to_string(env.masterPort);
}

} // namespace

bool meshGroup(const std::vector<MeshDimSpec> &mesh, const std::string &dim,
               int rank, int world, int &colour, int &coord, std::string &error) {
  int64_t product = 1;
  int64_t which = -1;
  for (size_t i = 0; i < mesh.size(); ++i) {
    product *= mesh[i].size;
    if (mesh[i].name == dim)
      which = static_cast<int64_t>(i);
  }
  if (product != world) {
    error = "the mesh has " + std::to_string(product) + " ranks but the world has " +
            std::to_string(world);
    return false;
  }
  if (which < 0) {
    error = "the mesh has no dim '" + dim + "'";
    return false;
  }
  // Row-major coordinates; the colour is the rank with this dim zeroed.
  int64_t stride = 1;
  for (size_t i = mesh.size(); i-- > static_cast<size_t>(which) + 1;)
    stride *= mesh[i].size;
  int64_t c = (rank / stride) % mesh[which].size;
  coord = static_cast<int>(c);
  colour = static_cast<int>(rank - c * stride);
  return true;
}

bool readRankEnv(const EnvLookup &env, RankEnv &out, std::string &error) {
  long long world = 0, rank = 0, local = -1, port = 0;
  if (!readInt(env, "WORLD_SIZE", true, 1, 1 << 24, world, error) ||
      !readInt(env, "RANK", true, 0, world - 1, rank, error) ||
      !readInt(env, "LOCAL_RANK", false, 0, world - 1, local, error) ||
      !readInt(env, "MASTER_PORT", true, 1, 65535, port, error))
    return false;
  // MFSDP_MASTER_PORT, when set, is the port mfsdp uses instead: torchrun
  // and torch.distributed keep a store listening on MASTER_PORT.
  std::string own;
  if (env("MFSDP_MASTER_PORT", own) &&
      !readInt(env, "MFSDP_MASTER_PORT", true, 1, 65535, port, error))
    return false;
  std::string addr;
  if (!env("MASTER_ADDR", addr) || addr.empty()) {
    error = "MASTER_ADDR is not set (or empty); expected the host name or "
            "address of rank 0";
    return false;
  }
  out.world = static_cast<int>(world);
  out.rank = static_cast<int>(rank);
  out.localRank = static_cast<int>(local < 0 ? rank : local);
  out.masterAddr = addr;
  out.masterPort = static_cast<int>(port);
  return true;
}

namespace {

/// MASTER_ADDR:MASTER_PORT resolved (rank 0: the local addresses to listen
/// on). False with `error`.
bool resolve(const RankEnv &env, addrinfo *&found, std::string &error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = env.rank == 0 ? AI_PASSIVE : 0;
  found = nullptr;
  std::string port = std::to_string(env.masterPort);
  int rc = getaddrinfo(env.rank == 0 ? nullptr : env.masterAddr.c_str(), port.c_str(),
                       &hints, &found);
  if (rc != 0) {
    error = "rank " + std::to_string(env.rank) + ": cannot resolve " + where(env) +
            ": " + gai_strerror(rc);
    return false;
  }
  return true;
}

/// Rank 0: a socket listening on MASTER_PORT, or -1 with `error`.
int listenOnPort(const RankEnv &env, std::string &error) {
  addrinfo *found = nullptr;
  if (!resolve(env, found, error))
    return -1;
  int listener = -1, why = 0;
  for (addrinfo *a = found; a && listener < 0; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) {
      why = errno;
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 128) == 0) {
      listener = fd;
    } else {
      why = errno;
      close(fd);
    }
  }
  freeaddrinfo(found);
  if (listener < 0)
    error = "rank 0: cannot listen on port " + std::to_string(env.masterPort) + ": " +
            std::strerror(why);
  errno = listener < 0 ? why : 0;
  return listener;
}

/// One connection attempt that gives up at the deadline (a blocking
/// connect to an unreachable host could wait minutes).
bool connectBefore(int fd, const addrinfo *a, Clock::time_point deadline,
                   std::string &why) {
  int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
  if (rc != 0 && errno == EINPROGRESS) {
    if (!readyBefore(fd, POLLOUT, deadline)) {
      why = "timed out";
      return false;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    rc = err ? -1 : 0;
    errno = err;
  }
  if (rc != 0) {
    why = std::strerror(errno);
    return false;
  }
  fcntl(fd, F_SETFL, flags);
  return true;
}

/// The other ranks: a socket connected to rank 0, retried until the
/// deadline (rank 0 may not listen yet), or -1 with `error`.
int connectToRoot(const RankEnv &env, Clock::time_point deadline, int timeoutMs,
                  std::string &error) {
  addrinfo *found = nullptr;
  if (!resolve(env, found, error))
    return -1;
  std::string lastFailure = "no address";
  while (true) {
    for (addrinfo *a = found; a; a = a->ai_next) {
      int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
      if (fd < 0) {
        lastFailure = std::strerror(errno);
        continue;
      }
      if (connectBefore(fd, a, deadline, lastFailure)) {
        freeaddrinfo(found);
        return fd;
      }
      close(fd);
    }
    if (remainingMs(deadline) == 0) {
      freeaddrinfo(found);
      error = "rank " + std::to_string(env.rank) + ": cannot reach rank 0 at " +
              where(env) + " within " + std::to_string(timeoutMs) +
              " ms (last error: " + lastFailure + ")";
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void putLE(uint8_t *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    p[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint64_t getLE(const uint8_t *p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

} // namespace

bool broadcastBlob(const RankEnv &env, std::vector<uint8_t> &blob, int timeoutMs,
                   std::string &error) {
  if (env.world <= 1)
    return true;
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeoutMs);
  const std::string port = std::to_string(env.masterPort);

  if (env.rank == 0) {
    int listener = listenOnPort(env, error);
    if (listener < 0)
      return false;
    // Every rank connects before any is answered, and the port is closed
    // before the answers: a rank that goes on to another broadcast on the
    // same port cannot be taken for a late rank of this one.
    std::vector<int> peers(env.world, -1);
    int arrived = 0;
    bool ok = true;
    while (ok && arrived < env.world - 1) {
      if (!readyBefore(listener, POLLIN, deadline)) {
        error = "rank 0: only " + std::to_string(arrived) + " of " +
                std::to_string(env.world - 1) + " ranks connected to port " + port +
                " within " + std::to_string(timeoutMs) + " ms";
        ok = false;
        break;
      }
      int fd = accept(listener, nullptr, nullptr);
      if (fd < 0)
        continue;
      uint8_t r[4];
      int peer = -1;
      if (transfer(fd, r, 4, false, deadline))
        peer = static_cast<int>(getLE(r, 4));
      if (peer < 1 || peer >= env.world || peers[peer] >= 0) {
        error = "rank 0: a connection on port " + port + " announced rank " +
                std::to_string(peer) + "; expected a rank in 1.." +
                std::to_string(env.world - 1) + " not seen before";
        close(fd);
        ok = false;
      } else {
        peers[peer] = fd;
        ++arrived;
      }
    }
    close(listener);
    uint8_t len[8];
    putLE(len, blob.size(), 8);
    for (int peer = 1; peer < env.world; ++peer) {
      if (peers[peer] < 0)
        continue;
      if (ok && (!transfer(peers[peer], len, 8, true, deadline) ||
                 !transfer(peers[peer], blob.data(), blob.size(), true, deadline))) {
        error = "rank 0: sending to rank " + std::to_string(peer) + " failed";
        ok = false;
      }
      close(peers[peer]);
    }
    return ok;
  }

  // Other ranks: connect (rank 0 may not listen yet), announce, receive.
  int fd = connectToRoot(env, deadline, timeoutMs, error);
  if (fd < 0)
    return false;
  uint8_t r[4];
  putLE(r, static_cast<uint64_t>(env.rank), 4);
  uint8_t len[8];
  bool ok = transfer(fd, r, 4, true, deadline) && transfer(fd, len, 8, false, deadline);
  uint64_t n = ok ? getLE(len, 8) : 0;
  if (ok && n > kMaxBlobBytes) {
    close(fd);
    error = "rank " + std::to_string(env.rank) + ": " + where(env) +
            " announced a blob of " + std::to_string(n) +
            " bytes; expected at most 1 MiB (is something else listening there?)";
    return false;
  }
  if (ok) {
    blob.resize(n);
    ok = transfer(fd, blob.data(), n, false, deadline);
  }
  close(fd);
  if (!ok)
    error = "rank " + std::to_string(env.rank) + ": the connection to rank 0 at " +
            where(env) + " broke or timed out";
  return ok;
}

// TcpStar. The wire format: a rank connects and sends a hello (the magic
// "mfs1", its RANK and WORLD_SIZE, 4 bytes each, little-endian); rank 0
// answers every rank with a frame (1 byte: 1 ok, 0 failed; 8 bytes: the
// length; the payload, which on failure is rank 0's error message) once
// all have arrived. An exchange: each rank sends its blob (8 bytes of
// length, the bytes), rank 0 answers with a frame whose payload is every
// rank's blob in rank order, each preceded by its length.

namespace {

const uint8_t kMagic[4] = {'m', 'f', 's', '1'};
/// How long rank 0 waits for a new connection's hello.
constexpr int kHelloMs = 3000;

bool sendFrame(int fd, bool ok, const std::vector<uint8_t> &payload,
               Clock::time_point deadline) {
  uint8_t head[9];
  head[0] = ok ? 1 : 0;
  putLE(head + 1, payload.size(), 8);
  return transfer(fd, head, 9, true, deadline) &&
         transfer(fd, const_cast<uint8_t *>(payload.data()), payload.size(), true,
                  deadline);
}

/// Receives a frame; false when the connection broke or timed out (`why`)
/// or the length is absurd.
bool receiveFrame(int fd, bool &ok, std::vector<uint8_t> &payload, uint64_t limit,
                  Clock::time_point deadline, std::string &why) {
  uint8_t head[9];
  if (!transfer(fd, head, 9, false, deadline)) {
    why = remainingMs(deadline) == 0 ? "timed out" : "the connection closed";
    return false;
  }
  uint64_t n = getLE(head + 1, 8);
  if (head[0] > 1 || n > limit) {
    why = "a malformed answer (is something else listening there?)";
    return false;
  }
  ok = head[0] == 1;
  payload.resize(n);
  if (!transfer(fd, payload.data(), n, false, deadline)) {
    why = remainingMs(deadline) == 0 ? "timed out" : "the connection closed";
    return false;
  }
  return true;
}

std::string listOf(const std::vector<int> &ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size() && i < 8; ++i)
    s += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 8)
    s += ", ...";
  return s;
}

} // namespace

TcpStar::~TcpStar() { closeAll(); }

std::string TcpStar::localAddress() const {
  int fd = root_;
  for (size_t r = 1; fd < 0 && r < peers_.size(); ++r)
    fd = peers_[r];
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  char host[NI_MAXHOST];
  if (fd < 0 || getsockname(fd, reinterpret_cast<sockaddr *>(&ss), &len) != 0 ||
      getnameinfo(reinterpret_cast<sockaddr *>(&ss), len, host, sizeof(host), nullptr, 0,
                  NI_NUMERICHOST) != 0)
    return "127.0.0.1";
  // A dual-stack listener sees IPv4 peers as ::ffff:a.b.c.d; the other
  // ranks' addresses (their own sockets' names) are plain IPv4 then.
  std::string address = host;
  const std::string mapped = "::ffff:";
  if (address.compare(0, mapped.size(), mapped) == 0 &&
      address.find('.') != std::string::npos)
    address.erase(0, mapped.size());
  return address;
}

void TcpStar::closeAll() {
  for (int &fd : peers_)
    if (fd >= 0) {
      close(fd);
      fd = -1;
    }
  if (root_ >= 0) {
    close(root_);
    root_ = -1;
  }
}

void TcpStar::abort(const std::string &message) {
  broken_ = true;
  const std::vector<uint8_t> text(message.begin(), message.end());
  // The other ranks are waiting for an answer; they get this one (best
  // effort: a rank that is gone is skipped).
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(1000);
  for (int fd : peers_)
    if (fd >= 0)
      sendFrame(fd, false, text, deadline);
  closeAll();
}

std::unique_ptr<TcpStar> TcpStar::connect(const RankEnv &env, int timeoutMs,
                                          std::string &error) {
  std::unique_ptr<TcpStar> star(new TcpStar(env, timeoutMs));
  if (env.world <= 1)
    return star;
  const Clock::time_point start = Clock::now();
  const std::string port = std::to_string(env.masterPort);
  if (env.rank != 0) {
    const Clock::time_point deadline = start + std::chrono::milliseconds(timeoutMs);
    star->root_ = connectToRoot(env, deadline, timeoutMs, error);
    if (star->root_ < 0)
      return nullptr;
    int one = 1;
    setsockopt(star->root_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    uint8_t hello[12];
    std::memcpy(hello, kMagic, 4);
    putLE(hello + 4, static_cast<uint64_t>(env.rank), 4);
    putLE(hello + 8, static_cast<uint64_t>(env.world), 4);
    bool ok = false;
    std::vector<uint8_t> answer;
    std::string why = "the connection closed";
    const Clock::time_point answerBy = start + std::chrono::milliseconds(2LL * timeoutMs);
    if (!transfer(star->root_, hello, sizeof(hello), true, answerBy) ||
        !receiveFrame(star->root_, ok, answer, kMaxBlobBytes, answerBy, why)) {
      error = "rank " + std::to_string(env.rank) + ": rank 0 at " + where(env) +
              " did not confirm that every rank connected (" + why + ")";
      return nullptr;
    }
    if (!ok) {
      error = "rank " + std::to_string(env.rank) + ": rank 0 reports: " +
              std::string(answer.begin(), answer.end());
      return nullptr;
    }
    return star;
  }

  const Clock::time_point deadline = start + std::chrono::milliseconds(timeoutMs);
  int listener = listenOnPort(env, error);
  if (listener < 0) {
    if (errno != EADDRINUSE)
      return nullptr;
    // Someone listens on the port already: a second process with RANK=0
    // (or another program). It is told, as a rank that announces RANK=0,
    // so that the rank 0 that listens fails too, naming the duplicate,
    // instead of running with whichever ranks reached it.
    const Clock::time_point tellBy = Clock::now() + std::chrono::milliseconds(kHelloMs);
    std::string ignored;
    const int fd = connectToRoot(env, tellBy, kHelloMs, ignored);
    if (fd >= 0) {
      uint8_t hello[12];
      std::memcpy(hello, kMagic, 4);
      putLE(hello + 4, 0, 4);
      putLE(hello + 8, static_cast<uint64_t>(env.world), 4);
      transfer(fd, hello, sizeof(hello), true, tellBy);
      close(fd);
    }
    error = "rank 0: port " + port + " is in use: another process listens there, a "
            "second process with RANK=0 (told so: it fails too) or another program; "
            "expected each of RANK 0.." + std::to_string(env.world - 1) + " once";
    return nullptr;
  }
  star->peers_.assign(env.world, -1);
  int arrived = 0;
  std::string failure;
  int strays = 0;
  while (failure.empty() && arrived < env.world - 1) {
    // Wait for a connection, and watch the ranks already connected: they
    // send nothing until answered, so a readable or hung-up socket is a
    // rank that exited (killed during setup), not one still missing.
    std::vector<pollfd> fds{{listener, POLLIN, 0}};
    std::vector<int> rankOf{0};
    for (int r = 1; r < env.world; ++r)
      if (star->peers_[r] >= 0) {
        fds.push_back({star->peers_[r], POLLIN, 0});
        rankOf.push_back(r);
      }
    int ready = 0;
    for (;;) {
      const int ms = remainingMs(deadline);
      ready = ms == 0 ? 0 : poll(fds.data(), fds.size(), ms);
      if (ready >= 0 || errno != EINTR)
        break;
    }
    for (size_t i = 1; i < fds.size() && ready > 0; ++i)
      if (fds[i].revents != 0)
        failure = "rank 0: rank " + std::to_string(rankOf[i]) +
                  " connected, then closed its connection before every rank "
                  "had connected (did it exit?)";
    if (!failure.empty())
      break;
    if (ready <= 0 || !(fds[0].revents & POLLIN)) {
      std::vector<int> missing;
      for (int r = 1; r < env.world; ++r)
        if (star->peers_[r] < 0)
          missing.push_back(r);
      failure = "rank 0: only " + std::to_string(arrived) + " of " +
                std::to_string(env.world - 1) + " ranks connected to port " + port +
                " within " + std::to_string(timeoutMs) + " ms (missing: rank" +
                (missing.size() > 1 ? "s " : " ") + listOf(missing) + ")";
      break;
    }
    int fd = accept(listener, nullptr, nullptr);
    if (fd < 0)
      continue;
    // A rank sends its hello as soon as it connects; a connection that does
    // not within a few seconds, or sends something else (a port scan, a
    // health check), is not a rank: dropped, and the wait goes on.
    uint8_t hello[12];
    const Clock::time_point helloBy =
        std::min(deadline, Clock::now() + std::chrono::milliseconds(kHelloMs));
    if (!transfer(fd, hello, sizeof(hello), false, helloBy) ||
        std::memcmp(hello, kMagic, 4) != 0) {
      close(fd);
      if (++strays == 1)
        std::fprintf(stderr,
                     "mfsdp: rank 0: a connection on port %s did not announce an "
                     "mfsdp rank; ignored (is another program using "
                     "MASTER_PORT?)\n",
                     port.c_str());
      continue;
    }
    const int peer = static_cast<int>(getLE(hello + 4, 4));
    const int world = static_cast<int>(getLE(hello + 8, 4));
    if (world != env.world) {
      close(fd);
      failure = "rank 0: rank " + std::to_string(peer) + " has WORLD_SIZE=" +
                std::to_string(world) + " but rank 0 has WORLD_SIZE=" +
                std::to_string(env.world) + "; every rank must have the same";
    } else if (peer == 0) {
      close(fd);
      failure = "rank 0: two processes have RANK=0 (the other could not listen on port " +
                port + "); expected each of 0.." + std::to_string(env.world - 1) + " once";
    } else if (peer < 1 || peer >= env.world || star->peers_[peer] >= 0) {
      failure = "rank 0: two processes have RANK=" + std::to_string(peer) +
                "; expected each of 0.." + std::to_string(env.world - 1) + " once";
      // The newcomer hears it too (the other gets it with every rank).
      const std::vector<uint8_t> text(failure.begin(), failure.end());
      sendFrame(fd, false, text, Clock::now() + std::chrono::milliseconds(1000));
      close(fd);
    } else {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      star->peers_[peer] = fd;
      ++arrived;
    }
  }
  // Closed before any rank is answered (TcpStar in Bootstrap.h).
  close(listener);
  if (!failure.empty()) {
    error = failure;
    star->abort(failure);
    return nullptr;
  }
  for (int r = 1; r < env.world; ++r)
    if (!sendFrame(star->peers_[r], true, {}, Clock::now() + std::chrono::milliseconds(timeoutMs))) {
      error = "rank 0: confirming the connection to rank " + std::to_string(r) +
              " failed (did it exit?)";
      star->abort(error);
      return nullptr;
    }
  return star;
}

bool TcpStar::allGather(const std::vector<uint8_t> &mine,
                        std::vector<std::vector<uint8_t>> &all, std::string &error) {
  const std::string me = "rank " + std::to_string(env_.rank);
  if (broken_) {
    error = me + ": an earlier exchange between the torchrun ranks failed";
    return false;
  }
  if (mine.size() > kMaxBlobBytes) {
    error = me + ": a blob of " + std::to_string(mine.size()) +
            " bytes to exchange; expected at most 1 MiB";
    return false;
  }
  all.assign(env_.world, {});
  all[env_.rank] = mine;
  if (env_.world <= 1)
    return true;
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + std::chrono::milliseconds(timeoutMs_);

  if (env_.rank != 0) {
    uint8_t len[8];
    putLE(len, mine.size(), 8);
    bool ok = false;
    std::vector<uint8_t> answer;
    std::string why = "the connection closed";
    const Clock::time_point answerBy = start + std::chrono::milliseconds(2LL * timeoutMs_);
    if (!transfer(root_, len, 8, true, deadline) ||
        !transfer(root_, const_cast<uint8_t *>(mine.data()), mine.size(), true, deadline) ||
        !receiveFrame(root_, ok, answer, static_cast<uint64_t>(env_.world) * (kMaxBlobBytes + 8),
                      answerBy, why)) {
      broken_ = true;
      closeAll();
      error = me + ": the exchange with rank 0 at " + where(env_) + " failed (" + why +
              " within " + std::to_string(2LL * timeoutMs_) + " ms)";
      return false;
    }
    if (!ok) {
      broken_ = true;
      closeAll();
      error = me + ": rank 0 reports: " + std::string(answer.begin(), answer.end());
      return false;
    }
    size_t at = 0;
    for (int r = 0; r < env_.world; ++r) {
      const bool hasLength = answer.size() - at >= 8;
      const uint64_t n = hasLength ? getLE(answer.data() + at, 8) : 0;
      if (!hasLength || n > answer.size() - at - 8) {
        broken_ = true;
        closeAll();
        error = me + ": rank 0 sent a malformed answer";
        return false;
      }
      at += 8;
      all[r].assign(answer.begin() + static_cast<std::ptrdiff_t>(at),
                    answer.begin() + static_cast<std::ptrdiff_t>(at + n));
      at += n;
    }
    return true;
  }

  // Rank 0: every rank's blob, in rank order, then the answer to all.
  for (int r = 1; r < env_.world; ++r) {
    uint8_t len[8];
    std::string failure;
    if (!transfer(peers_[r], len, 8, false, deadline)) {
      failure = remainingMs(deadline) == 0
                    ? "rank " + std::to_string(r) + " sent nothing within " +
                          std::to_string(timeoutMs_) + " ms"
                    : "rank " + std::to_string(r) +
                          " closed its connection (did it exit or fail?)";
    } else {
      uint64_t n = getLE(len, 8);
      if (n > kMaxBlobBytes) {
        failure = "rank " + std::to_string(r) + " sent a blob of " + std::to_string(n) +
                  " bytes; expected at most 1 MiB";
      } else {
        all[r].resize(n);
        if (!transfer(peers_[r], all[r].data(), n, false, deadline))
          failure = "rank " + std::to_string(r) + " broke off or timed out while "
                    "sending its blob";
      }
    }
    if (!failure.empty()) {
      error = "rank 0: " + failure + " (in an exchange between the torchrun ranks)";
      abort(error);
      return false;
    }
  }
  std::vector<uint8_t> payload;
  for (const std::vector<uint8_t> &blob : all) {
    uint8_t len[8];
    putLE(len, blob.size(), 8);
    payload.insert(payload.end(), len, len + 8);
    payload.insert(payload.end(), blob.begin(), blob.end());
  }
  for (int r = 1; r < env_.world; ++r)
    if (!sendFrame(peers_[r], true, payload,
                   Clock::now() + std::chrono::milliseconds(timeoutMs_))) {
      error = "rank 0: sending the exchange's result to rank " + std::to_string(r) +
              " failed (did it exit?)";
      abort(error);
      return false;
    }
  return true;
}

} // namespace mfsdp::rt
