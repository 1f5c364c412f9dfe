//===- Bootstrap.cpp - Ranks from the torchrun environment ----------------===//
//
// The wire format of broadcastBlob: every non-zero rank connects and sends
// its rank (4 bytes, little-endian); rank 0 answers each with the blob's
// length (8 bytes) and the blob. Rank 0 waits for WORLD_SIZE - 1 ranks.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/runtime/Bootstrap.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
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
  return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

/// Sends or receives exactly n bytes before the deadline.
bool transfer(int fd, void *data, size_t n, bool sending, Clock::time_point deadline) {
  auto *p = static_cast<uint8_t *>(data);
  while (n > 0) {
    pollfd pfd{fd, static_cast<short>(sending ? POLLOUT : POLLIN), 0};
    int ms = remainingMs(deadline);
    if (ms == 0 || poll(&pfd, 1, ms) <= 0)
      return false;
    ssize_t k = sending ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
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

bool broadcastBlob(const RankEnv &env, std::vector<uint8_t> &blob, int timeoutMs,
                   std::string &error) {
  if (env.world <= 1)
    return true;
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeoutMs);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = env.rank == 0 ? AI_PASSIVE : 0;
  addrinfo *found = nullptr;
  std::string port = std::to_string(env.masterPort);
  int rc = getaddrinfo(env.rank == 0 ? nullptr : env.masterAddr.c_str(), port.c_str(),
                       &hints, &found);
  if (rc != 0) {
    error = "rank " + std::to_string(env.rank) + ": cannot resolve " + where(env) +
            ": " + gai_strerror(rc);
    return false;
  }

  if (env.rank == 0) {
    int listener = -1;
    for (addrinfo *a = found; a && listener < 0; a = a->ai_next) {
      int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
      if (fd < 0)
        continue;
      int one = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 128) == 0)
        listener = fd;
      else
        close(fd);
    }
    freeaddrinfo(found);
    if (listener < 0) {
      error = "rank 0: cannot listen on port " + port + ": " + std::strerror(errno);
      return false;
    }
    std::vector<bool> seen(env.world, false);
    int arrived = 0;
    bool ok = true;
    while (ok && arrived < env.world - 1) {
      pollfd pfd{listener, POLLIN, 0};
      int ms = remainingMs(deadline);
      if (ms == 0 || poll(&pfd, 1, ms) <= 0) {
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
      uint64_t n = blob.size();
      uint8_t len[8];
      for (int i = 0; i < 8; ++i)
        len[i] = static_cast<uint8_t>(n >> (8 * i));
      int peer = -1;
      if (transfer(fd, r, 4, false, deadline))
        peer = r[0] | r[1] << 8 | r[2] << 16 | r[3] << 24;
      if (peer < 1 || peer >= env.world || seen[peer]) {
        error = "rank 0: a connection on port " + port + " announced rank " +
                std::to_string(peer) + "; expected a rank in 1.." +
                std::to_string(env.world - 1) + " not seen before";
        ok = false;
      } else if (!transfer(fd, len, 8, true, deadline) ||
                 !transfer(fd, blob.data(), blob.size(), true, deadline)) {
        error = "rank 0: sending to rank " + std::to_string(peer) + " failed";
        ok = false;
      } else {
        seen[peer] = true;
        ++arrived;
      }
      close(fd);
    }
    close(listener);
    return ok;
  }

  // Other ranks: connect (rank 0 may not listen yet), announce, receive.
  std::string lastFailure = "no address";
  while (true) {
    for (addrinfo *a = found; a; a = a->ai_next) {
      int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
      if (fd < 0)
        continue;
      if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
        lastFailure = std::strerror(errno);
        close(fd);
        continue;
      }
      freeaddrinfo(found);
      uint8_t r[4] = {static_cast<uint8_t>(env.rank), static_cast<uint8_t>(env.rank >> 8),
                      static_cast<uint8_t>(env.rank >> 16),
                      static_cast<uint8_t>(env.rank >> 24)};
      uint8_t len[8];
      bool ok = transfer(fd, r, 4, true, deadline) && transfer(fd, len, 8, false, deadline);
      uint64_t n = 0;
      for (int i = 0; ok && i < 8; ++i)
        n |= static_cast<uint64_t>(len[i]) << (8 * i);
      if (ok && n > (uint64_t(1) << 20)) {
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
    if (remainingMs(deadline) == 0) {
      freeaddrinfo(found);
      error = "rank " + std::to_string(env.rank) + ": cannot reach rank 0 at " +
              where(env) + " within " + std::to_string(timeoutMs) +
              " ms (last error: " + lastFailure + ")";
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

} // namespace mfsdp::rt
