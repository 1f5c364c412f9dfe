//===- TorchrunTest.cpp - mfsdp_create under the torchrun bootstrap -------===//
//
// Real processes (fork) on localhost, each with the torchrun variables set
// in its environment, and no MPI: the control plane's agreements, a rank
// that is missing or dies (an error on every rank within a bound, never a
// hang), the host backend's gloo collectives on every group of a mesh (the
// checks the MPI ones pass, CollectiveChecks.h), and
// mfsdp_create_with_config with MFSDP_BOOTSTRAP_TORCHRUN: a step of the
// host backend over gloo (equal to a world of one), the CUDA backend
// without a driver, and bad variables named through mfsdp_last_error. A process that called MPI without MPI_Init
// would abort and give no answer, failing the test.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/runtime.h"
#include "mfsdp/runtime/ControlPlane.h"
#include "mfsdp/runtime/HostComm.h"

#include "CollectiveChecks.h"
#include "FreePort.h"

#include <gtest/gtest.h>

#include <dlfcn.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>

using namespace mfsdp::rt;

namespace {

using Vars = std::map<std::string, std::string>;
using Clock = std::chrono::steady_clock;

using mfsdp::test::freePort;

Vars torchrunVars(int rank, int world, int port) {
  return {{"RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_RANK", std::to_string(rank)},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)}};
}

struct Outcome {
  std::vector<std::string> answers; ///< per process; "" when it gave none
  std::vector<bool> answered;
  long long elapsedMs = 0;
};

/// Forks one process per entry of `vars`, with exactly those torchrun
/// variables in its environment; each runs `body(i)` and reports the
/// string it returns. Processes that have not answered within `limitMs`
/// are killed (a hang is a failure, not a stuck test).
Outcome runProcesses(const std::vector<Vars> &vars,
                 const std::function<std::string(size_t)> &body, int limitMs) {
  const Clock::time_point start = Clock::now();
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (size_t i = 0; i < vars.size(); ++i) {
    int fds[2];
    if (pipe(fds) != 0)
      std::abort();
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      for (const char *name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                               "MASTER_PORT", "MFSDP_MASTER_PORT", "GLOO_SOCKET_IFNAME"})
        unsetenv(name);
      for (const auto &[name, value] : vars[i])
        setenv(name.c_str(), value.c_str(), 1);
      std::string answer = "answered: " + body(i);
      const char *p = answer.data();
      size_t n = answer.size();
      while (n > 0) {
        ssize_t k = write(fds[1], p, n);
        if (k <= 0)
          break;
        p += k;
        n -= static_cast<size_t>(k);
      }
      _exit(0);
    }
    close(fds[1]);
    pids.push_back(pid);
    pipes.push_back(fds[0]);
  }
  Outcome run;
  run.answers.assign(vars.size(), "");
  run.answered.assign(vars.size(), false);
  std::vector<bool> open(vars.size(), true);
  const Clock::time_point deadline = start + std::chrono::milliseconds(limitMs);
  while (true) {
    std::vector<pollfd> fds;
    std::vector<size_t> which;
    for (size_t i = 0; i < pipes.size(); ++i)
      if (open[i]) {
        fds.push_back({pipes[i], POLLIN, 0});
        which.push_back(i);
      }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now())
                    .count();
    if (fds.empty() || left <= 0 || poll(fds.data(), fds.size(), static_cast<int>(left)) <= 0)
      break;
    for (size_t k = 0; k < fds.size(); ++k) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR)))
        continue;
      char buf[4096];
      ssize_t n = read(fds[k].fd, buf, sizeof(buf));
      if (n > 0)
        run.answers[which[k]].append(buf, static_cast<size_t>(n));
      else
        open[which[k]] = false;
    }
  }
  run.elapsedMs =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  for (size_t i = 0; i < pids.size(); ++i) {
    const bool killed = open[i];
    if (killed)
      kill(pids[i], SIGKILL);
    int status = 0;
    waitpid(pids[i], &status, 0);
    close(pipes[i]);
    const std::string prefix = "answered: ";
    run.answered[i] = !open[i] && run.answers[i].compare(0, prefix.size(), prefix) == 0;
    if (run.answered[i])
      run.answers[i].erase(0, prefix.size());
    else
      run.answers[i] = "(process " + std::to_string(i) +
                       (killed ? " gave no answer within " + std::to_string(limitMs) +
                                     " ms and was killed)"
                               : " ended without an answer: wait status " +
                                     std::to_string(status) + ")");
  }
  return run;
}

std::vector<Vars> world(int n, int port) {
  std::vector<Vars> vars;
  for (int r = 0; r < n; ++r)
    vars.push_back(torchrunVars(r, n, port));
  return vars;
}

/// The control plane of this process's environment, or null with `error`.
std::unique_ptr<ControlPlane> controlFromEnvironment(int timeoutMs, std::string &error) {
  RankEnv env;
  if (!readRankEnv(processEnvironment(), env, error))
    return nullptr;
  return std::unique_ptr<ControlPlane>(createTorchrunControlPlane(env, timeoutMs, error));
}

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

/// A plan for `n` ranks, all in dp_shard (as test/parity/ErrorsTest.cpp).
struct Plan {
  mfsdp_param_desc params[2] = {
      {"w", 4, 3, 0, MFSDP_ROW_SHARD, 0, MFSDP_OPT_ADAMW, MFSDP_COMPUTE_F32, 0, 0},
      {"v", 3, 3, 1, MFSDP_OWNER, 0, MFSDP_OPT_MUON, MFSDP_COMPUTE_F32, 0, 0},
  };
  mfsdp_plan plan = MFSDP_PLAN_INITIALIZER;
  explicit Plan(int n) {
    plan.zero = 3;
    plan.dp_replicate = 1;
    plan.dp_shard = n;
    plan.world = n;
    plan.num_units = 2;
    plan.num_params = 2;
    plan.params = params;
    plan.adamw_lr = 1e-3f;
    plan.muon_lr = 0.02f;
    plan.muon_ns_steps = 5;
    plan.hash = mfsdp_plan_hash(&plan);
  }
};

/// mfsdp_create_with_config under torchrun: "<status>: <last error>".
std::string createUnderTorchrun(int planWorld, int32_t backend, int timeoutMs) {
  Plan p(planWorld);
  mfsdp_config config = MFSDP_CONFIG_INITIALIZER;
  config.backend = backend;
  config.bootstrap = MFSDP_BOOTSTRAP_TORCHRUN;
  config.bootstrap_timeout_ms = timeoutMs;
  mfsdp_step *step = nullptr;
  mfsdp_status st = mfsdp_create_with_config(&p.plan, &config, &step);
  std::string out = std::to_string(st) + ": " + mfsdp_last_error(step);
  mfsdp_destroy(step);
  return out;
}

/// One training step of Plan(n) on the host backend under torchrun, every
/// gradient element `grad`: the stored parameters, printed exactly, or
/// "<status>: <last error>".
std::string stepUnderTorchrun(int n, float grad) {
  Plan p(n);
  mfsdp_config config = MFSDP_CONFIG_INITIALIZER;
  config.backend = MFSDP_BACKEND_HOST;
  config.bootstrap = MFSDP_BOOTSTRAP_TORCHRUN;
  config.bootstrap_timeout_ms = 10000;
  mfsdp_step *step = nullptr;
  mfsdp_status st = mfsdp_create_with_config(&p.plan, &config, &step);
  auto failed = [&](mfsdp_status s) {
    std::string out = std::to_string(s) + ": " + mfsdp_last_error(step);
    mfsdp_destroy(step);
    return out;
  };
  if (st != MFSDP_OK)
    return failed(st);
  std::vector<float> init[2];
  for (int32_t i = 0; i < 2; ++i) {
    init[i].resize(p.params[i].rows * p.params[i].cols);
    for (size_t k = 0; k < init[i].size(); ++k)
      init[i][k] = 0.1f * static_cast<float>(k) - 0.3f * static_cast<float>(i + 1);
    if ((st = mfsdp_load_param(step, i, init[i].data())))
      return failed(st);
  }
  // Unit u holds parameter u.
  for (int32_t u = 0; u < 2; ++u)
    if ((st = mfsdp_pre_forward(step, u)) || (st = mfsdp_post_forward(step, u)))
      return failed(st);
  for (int32_t u = 1; u >= 0; --u) {
    DLTensor g;
    if ((st = mfsdp_pre_backward(step, u)) || (st = mfsdp_grad_view(step, u, &g)))
      return failed(st);
    std::fill_n(static_cast<float *>(g.data), g.shape[0] * g.shape[1], grad);
    if ((st = mfsdp_post_backward(step, u)))
      return failed(st);
  }
  if ((st = mfsdp_optimizer_step(step)))
    return failed(st);
  std::string out;
  for (int32_t i = 0; i < 2; ++i) {
    std::vector<float> stored(p.params[i].rows * p.params[i].cols);
    if ((st = mfsdp_store_param(step, i, stored.data())))
      return failed(st);
    if (stored == init[i])
      return std::string("the step did not change ") + p.params[i].name;
    out += p.params[i].name;
    for (float x : stored) {
      char text[32];
      std::snprintf(text, sizeof(text), " %a", static_cast<double>(x));
      out += text;
    }
    out += "\n";
  }
  mfsdp_destroy(step);
  return out;
}

} // namespace

TEST(Torchrun, TheRanksAgreeOverTcp) {
  const int n = 4, port = freePort();
  Outcome run = runProcesses(
      world(n, port),
      [](size_t) -> std::string {
        std::string error;
        // Two control planes in a row on the same port (as NCCL's two
        // communicators of the CUDA backend), several exchanges each.
        for (int round = 0; round < 2; ++round) {
          auto control = controlFromEnvironment(10000, error);
          if (!control)
            return "create: " + error;
          const int r = control->rank();
          std::vector<int64_t> lo, hi;
          if (!control->minMax({r, -r, 7, int64_t(1) << 40}, lo, hi, error))
            return "minMax: " + error;
          if (lo != std::vector<int64_t>{0, -(n - 1), 7, int64_t(1) << 40} ||
              hi != std::vector<int64_t>{n - 1, 0, 7, int64_t(1) << 40})
            return "minMax gave wrong values";
          std::vector<uint8_t> blob;
          if (r == 0)
            for (int i = 0; i < 300; ++i)
              blob.push_back(static_cast<uint8_t>(i * 7 + round));
          if (!control->broadcast(blob, error))
            return "broadcast: " + error;
          if (blob.size() != 300 || blob[299] != static_cast<uint8_t>(299 * 7 + round))
            return "broadcast gave a wrong blob";
          // Rank r's blob is r + 1 bytes of value r (rank 0's is one 0).
          std::vector<std::vector<uint8_t>> all;
          if (!control->allGather(std::vector<uint8_t>(r + 1, static_cast<uint8_t>(r)), all,
                                  error))
            return "allGather: " + error;
          for (int k = 0; k < n; ++k)
            if (all.size() != static_cast<size_t>(n) ||
                all[k] != std::vector<uint8_t>(k + 1, static_cast<uint8_t>(k)))
              return "allGather gave a wrong blob for rank " + std::to_string(k);
          if (control->localAddress() != "127.0.0.1")
            return "local address " + control->localAddress() + ", expected 127.0.0.1";
          if (control->world() != n || control->localRank() != r ||
              std::string(control->name()) != "torchrun" || !control->rankEnv())
            return "wrong world, local rank or name";
        }
        return "ok";
      },
      30000);
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(run.answers[r], "ok") << "rank " << r;
}

TEST(Torchrun, AMissingRankIsAnErrorOnEveryRank) {
  const int port = freePort();
  // WORLD_SIZE=3, but rank 2 never starts.
  std::vector<Vars> vars = world(3, port);
  vars.pop_back();
  Outcome run = runProcesses(
      vars,
      [](size_t) -> std::string {
        std::string error;
        auto control = controlFromEnvironment(500, error);
        return control ? "connected" : error;
      },
      20000);
  ASSERT_TRUE(run.answered[0] && run.answered[1]) << run.answers[0] << run.answers[1];
  EXPECT_TRUE(contains(run.answers[0], "rank 0: only 1 of 2 ranks connected to port " +
                                           std::to_string(port) +
                                           " within 500 ms (missing: rank 2)"))
      << run.answers[0];
  // Rank 1 hears it from rank 0.
  EXPECT_TRUE(contains(run.answers[1], "rank 1: rank 0 reports: rank 0: only 1 of 2"))
      << run.answers[1];
  EXPECT_LT(run.elapsedMs, 10000);
}

TEST(Torchrun, ADeadRankIsAnErrorNotATimeout) {
  const int port = freePort();
  // Rank 2 connects, then exits before the agreement.
  Outcome run = runProcesses(
      world(3, port),
      [](size_t i) -> std::string {
        std::string error;
        auto control = controlFromEnvironment(20000, error);
        if (!control)
          return "create: " + error;
        if (i == 2)
          _exit(3);
        std::vector<int64_t> lo, hi;
        return control->minMax({1}, lo, hi, error) ? "agreed" : error;
      },
      30000);
  EXPECT_TRUE(contains(run.answers[0], "rank 0: rank 2 closed its connection"))
      << run.answers[0];
  EXPECT_TRUE(contains(run.answers[1], "rank 1: rank 0 reports: rank 0: rank 2 closed"))
      << run.answers[1];
  EXPECT_FALSE(run.answered[2]);
  // Long before the 20 s timeout: the closed connection is seen at once.
  EXPECT_LT(run.elapsedMs, 10000);
}

/// Connects to rank 0's port on localhost, retrying for up to 10 s; the
/// socket, or -1.
int connectTo(int port) {
  const Clock::time_point until = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < until) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) == 0)
      return fd;
    close(fd);
    usleep(20000);
  }
  return -1;
}

TEST(Torchrun, AStrayConnectionIsIgnored) {
  const int port = freePort();
  // A third process that is no rank connects to rank 0's port first (a port
  // scan, a health check) and sends something else; rank 1 starts a second
  // later. The ranks still agree: the stray connection is dropped.
  std::vector<Vars> vars = world(2, port);
  vars.push_back(vars[1]);
  Outcome run = runProcesses(
      vars,
      [port](size_t i) -> std::string {
        if (i == 2) {
          int fd = connectTo(port);
          if (fd < 0)
            return "stray: no listener";
          const char junk[] = "GET / HTTP/1.0\r\n\r\n";
          (void)!write(fd, junk, sizeof(junk) - 1);
          close(fd);
          return "stray: sent";
        }
        if (i == 1)
          usleep(1000000);
        std::string error;
        auto control = controlFromEnvironment(20000, error);
        if (!control)
          return error;
        std::vector<int64_t> lo, hi;
        return control->minMax({1}, lo, hi, error) ? "agreed" : error;
      },
      30000);
  EXPECT_EQ(run.answers[0], "agreed");
  EXPECT_EQ(run.answers[1], "agreed");
  EXPECT_EQ(run.answers[2], "stray: sent");
}

// A RANK given to two processes is an error on both, whichever starts
// first: a duplicate RANK=1 is named by rank 0, to both of them; a
// duplicate RANK=0 cannot listen on the port, says so, and tells the rank 0
// that listens, which fails naming it and tells the ranks connected to it.
// WORLD_SIZE=3; each ordering of the two duplicates is run.
TEST(Torchrun, ADuplicateRankIsAnErrorOnBothProcessesInEveryOrdering) {
  for (int dup : {1, 0})
    for (bool duplicateFirst : {false, true}) {
      SCOPED_TRACE("RANK=" + std::to_string(dup) +
                   (duplicateFirst ? ", the duplicate first" : ", the duplicate second"));
      const int port = freePort();
      std::vector<Vars> vars = world(3, port);
      vars.push_back(torchrunVars(dup, 3, port)); // process 3: the duplicate of `dup`
      // The two processes with RANK=dup start 300 ms apart, in either order;
      // rank 2 starts 600 ms late.
      const int other = 2;
      Outcome run = runProcesses(
          vars,
          [&](size_t i) -> std::string {
            int delayMs = 0;
            if (static_cast<int>(i) == dup)
              delayMs = duplicateFirst ? 300 : 0;
            else if (i == 3)
              delayMs = duplicateFirst ? 0 : 300;
            else if (static_cast<int>(i) == other)
              delayMs = 600;
            usleep(static_cast<useconds_t>(delayMs) * 1000);
            std::string error;
            auto control = controlFromEnvironment(3000, error);
            return control ? "connected" : error;
          },
          30000);
      for (size_t i = 0; i < vars.size(); ++i) {
        ASSERT_TRUE(run.answered[i]) << "process " << i;
        EXPECT_NE(run.answers[i], "connected") << "process " << i << " went on";
        if (std::getenv("MFSDP_TEST_VERBOSE"))
          std::printf("process %zu: %s\n", i, run.answers[i].c_str());
      }
      const std::string named =
          "two processes have RANK=" + std::to_string(dup);
      if (dup == 1) {
        // Rank 0 names it, and both RANK=1 processes hear it from rank 0.
        EXPECT_TRUE(contains(run.answers[0], named)) << run.answers[0];
        for (size_t i : {size_t(1), size_t(3)})
          EXPECT_TRUE(contains(run.answers[i], "rank 1: rank 0 reports: rank 0: " + named))
              << run.answers[i];
      } else {
        // The one that listens names the duplicate; the other says the port
        // is in use.
        const std::string &a = run.answers[0], &b = run.answers[3];
        EXPECT_TRUE((contains(a, named) && contains(b, "is in use")) ||
                    (contains(b, named) && contains(a, "is in use")))
            << a << " | " << b;
      }
      EXPECT_LT(run.elapsedMs, 15000);
    }
}

TEST(Torchrun, ARankKilledDuringSetupIsNamedAtOnce) {
  const int port = freePort();
  // WORLD_SIZE=3: rank 2 connects and announces itself, then dies before
  // rank 1 (which never starts) has connected. Rank 0 says that rank 2
  // left, at once, not that rank 1 is missing when its 20 s run out.
  std::vector<Vars> vars = world(3, port);
  vars.erase(vars.begin() + 1);
  Outcome run = runProcesses(
      vars,
      [port](size_t i) -> std::string {
        if (i == 1) {
          int fd = connectTo(port);
          if (fd < 0)
            return "rank 2: no listener";
          const uint8_t hello[12] = {'m', 'f', 's', '1', 2, 0, 0, 0, 3, 0, 0, 0};
          (void)!write(fd, hello, sizeof(hello));
          usleep(200000);
          _exit(3); // killed during setup
        }
        std::string error;
        auto control = controlFromEnvironment(20000, error);
        return control ? "connected" : error;
      },
      30000);
  EXPECT_TRUE(contains(run.answers[0], "rank 0: rank 2 connected, then closed its "
                                       "connection before every rank had connected"))
      << run.answers[0];
  EXPECT_FALSE(run.answered[1]);
  EXPECT_LT(run.elapsedMs, 10000);
}

/// The gloo groups along dp_shard and dp_replicate of `mesh` for this
/// process's torchrun world, or an empty list with `error`; `control`, when
/// given, keeps the control plane they were created over.
std::vector<std::unique_ptr<HostComm>>
glooGroups(const std::vector<MeshDimSpec> &mesh, int timeoutMs, std::string &error,
           std::unique_ptr<ControlPlane> *control = nullptr) {
  std::vector<std::unique_ptr<HostComm>> comms;
  std::unique_ptr<ControlPlane> plane = controlFromEnvironment(timeoutMs, error);
  if (plane)
    createGlooComms(mesh, {"dp_shard", "dp_replicate"}, *plane, timeoutMs, comms, error);
  if (control)
    *control = std::move(plane);
  return comms;
}

TEST(Torchrun, GlooCollectivesOnEveryGroupOfTheMesh) {
  if (!hasGloo())
    GTEST_SKIP() << "libmfsdp_rt was built without gloo";
  // One rank; a ring of 3 (not a power of two); HSDP 2x2, whose groups
  // follow the row-major mesh as MPI's do.
  const std::vector<std::vector<MeshDimSpec>> meshes = {
      {{"dp_replicate", 1}, {"dp_shard", 1}},
      {{"dp_replicate", 1}, {"dp_shard", 3}},
      {{"dp_replicate", 2}, {"dp_shard", 2}}};
  for (const std::vector<MeshDimSpec> &mesh : meshes) {
    int n = 1;
    for (const MeshDimSpec &d : mesh)
      n *= static_cast<int>(d.size);
    std::vector<Vars> vars = world(n, freePort());
    // The ring of 3 listens on the interface named as PyTorch's is.
    if (n == 3)
      for (Vars &v : vars)
        v["GLOO_SOCKET_IFNAME"] = "lo";
    Outcome run = runProcesses(
        vars,
        [&](size_t i) -> std::string {
          std::string error;
          std::vector<std::unique_ptr<HostComm>> comms = glooGroups(mesh, 10000, error);
          if (comms.size() != 2)
            return "create: " + error;
          std::string out;
          const char *dims[2] = {"dp_shard", "dp_replicate"};
          for (int d = 0; d < 2; ++d) {
            int colour = 0, coord = 0;
            if (!meshGroup(mesh, dims[d], static_cast<int>(i), n, colour, coord, error) ||
                comms[d]->rank() != coord)
              out += std::string(dims[d]) + ": rank " + std::to_string(comms[d]->rank()) +
                     ", meshGroup's " + std::to_string(coord) + "; ";
            mfsdp::test::CheckResults results;
            mfsdp::test::checkCollectives(*comms[d], dims[d], results);
            for (const std::string &what : results.failed)
              out += what + "; ";
            if (results.passed == 0)
              out += std::string(dims[d]) + ": nothing checked; ";
          }
          return out.empty() ? "ok" : out;
        },
        60000);
    for (int r = 0; r < n; ++r)
      EXPECT_EQ(run.answers[r], "ok") << "rank " << r << " of " << n;
  }
}

TEST(Torchrun, GlooWithAMissingInterfaceFailsOnEveryRank) {
  if (!hasGloo())
    GTEST_SKIP() << "libmfsdp_rt was built without gloo";
  // Only rank 1 is told to listen on an interface that does not exist.
  std::vector<Vars> vars = world(3, freePort());
  vars[1]["GLOO_SOCKET_IFNAME"] = "mfsdp-no-such-if0";
  Outcome run = runProcesses(
      vars,
      [](size_t) -> std::string {
        std::string error;
        return glooGroups({{"dp_replicate", 1}, {"dp_shard", 3}}, 5000, error).empty() ? error : "created";
      },
      30000);
  for (int r = 0; r < 3; ++r)
    EXPECT_TRUE(contains(run.answers[r],
                         "rank 1: cannot create gloo's TCP device and pairs"))
        << run.answers[r];
  EXPECT_LT(run.elapsedMs, 10000);
}

TEST(Torchrun, AGlooPeerThatDiesIsAnErrorNotATimeout) {
  if (!hasGloo())
    GTEST_SKIP() << "libmfsdp_rt was built without gloo";
  // Once every rank has connected its pairs (they agree on it over the
  // control plane), rank 2 exits before the all-reduce; the others see its
  // connections close, long before the 30-minute timeout.
  Outcome run = runProcesses(
      world(3, freePort()),
      [](size_t i) -> std::string {
        std::string error;
        std::unique_ptr<ControlPlane> control;
        std::vector<std::unique_ptr<HostComm>> comms =
            glooGroups({{"dp_replicate", 1}, {"dp_shard", 3}}, 10000, error, &control);
        std::vector<int64_t> lo, hi;
        if (comms.empty() || !control->minMax({1}, lo, hi, error))
          return "create: " + error;
        if (i == 2)
          _exit(3);
        std::vector<float> buf(1000, 1.f);
        return comms[0]->allReduce(buf.data(), 1000) ? HostComm::lastError() : "reduced";
      },
      30000);
  for (int r : {0, 1})
    EXPECT_TRUE(contains(run.answers[r], "gloo allReduce failed: ")) << run.answers[r];
  EXPECT_FALSE(run.answered[2]);
  EXPECT_LT(run.elapsedMs, 10000);
}

TEST(Torchrun, CudaWithoutADriverFailsOnEveryRank) {
  if (void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    dlclose(driver);
    GTEST_SKIP() << "this machine has a CUDA driver";
  }
  const int n = 3, port = freePort();
  Outcome run = runProcesses(
      world(n, port),
      [](size_t) { return createUnderTorchrun(n, MFSDP_BACKEND_CUDA, 5000); }, 30000);
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(contains(run.answers[r], std::to_string(MFSDP_ERROR_BACKEND) +
                                             ": the CUDA backend is not available: rank " +
                                             std::to_string(r) +
                                             ": no CUDA driver on this machine"))
        << run.answers[r];
  }
  EXPECT_LT(run.elapsedMs, 10000);
}

TEST(Torchrun, TheHostBackendRunsAStepOverGloo) {
  const int n = 3;
  if (!hasGloo()) {
    // Built without gloo: refused on every rank, saying why.
    Outcome run = runProcesses(
        world(n, freePort()),
        [](size_t) { return createUnderTorchrun(n, MFSDP_BACKEND_HOST, 5000); }, 30000);
    for (int r = 0; r < n; ++r)
      EXPECT_TRUE(contains(run.answers[r], std::to_string(MFSDP_ERROR_INVALID) +
                                               ": this libmfsdp_rt was built without gloo"))
          << run.answers[r];
    return;
  }
  // Rank r's gradients are all r + 1; a world of one whose gradients are
  // their average, 2, must end with the same parameters.
  Outcome run = runProcesses(
      world(n, freePort()),
      [](size_t i) { return stepUnderTorchrun(n, static_cast<float>(i + 1)); }, 30000);
  Outcome alone = runProcesses(
      world(1, freePort()), [](size_t) { return stepUnderTorchrun(1, 2.f); }, 30000);
  ASSERT_TRUE(contains(alone.answers[0], "w ")) << alone.answers[0];
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(run.answers[r], alone.answers[0]) << "rank " << r;
}

TEST(Torchrun, TheRanksMustAskForOneBackend) {
  // Only rank 1 asks for the host backend: every rank is told.
  const int n = 3;
  Outcome run = runProcesses(
      world(n, freePort()),
      [](size_t i) {
        return createUnderTorchrun(n, i == 1 ? MFSDP_BACKEND_HOST : MFSDP_BACKEND_CUDA,
                                   5000);
      },
      30000);
  // Without gloo rank 1 refuses the host backend itself, and the others
  // hear that it refused.
  for (int r = 0; r < n; ++r)
    EXPECT_TRUE(contains(run.answers[r],
                         std::to_string(MFSDP_ERROR_INVALID) +
                             (hasGloo()  ? ": the ranks asked for different backends"
                              : r == 1 ? ": this libmfsdp_rt was built without gloo"
                                       : ": another rank refused the plan or its config")))
        << run.answers[r];
}

TEST(Torchrun, BadVariablesAreNamedByMfsdpCreate) {
  const int port = freePort();
  struct Case {
    Vars vars;
    std::string want;
  };
  Vars badRank = torchrunVars(0, 2, port), badWorld = badRank, badPort = badRank,
       noAddr = badRank;
  badRank["RANK"] = "5";
  badWorld["WORLD_SIZE"] = "two";
  badPort["MASTER_PORT"] = "70000";
  noAddr.erase("MASTER_ADDR");
  const std::string invalid = std::to_string(MFSDP_ERROR_INVALID) + ": the torchrun bootstrap: ";
  const std::vector<Case> cases = {
      {badRank, invalid + "RANK=5 is out of range; expected 0..1"},
      {badWorld, invalid + "WORLD_SIZE='two' is not an integer"},
      {badPort, invalid + "MASTER_PORT=70000 is out of range; expected 1..65535"},
      {noAddr, invalid + "MASTER_ADDR is not set (or empty)"},
  };
  std::vector<Vars> vars;
  for (const Case &c : cases)
    vars.push_back(c.vars);
  Outcome run = runProcesses(
      vars, [](size_t) { return createUnderTorchrun(2, MFSDP_BACKEND_CUDA, 5000); },
      30000);
  for (size_t i = 0; i < cases.size(); ++i)
    EXPECT_TRUE(contains(run.answers[i], cases[i].want))
        << "want '" << cases[i].want << "', got '" << run.answers[i] << "'";
  // A plan for another world size.
  run = runProcesses(
      world(2, freePort()),
      [](size_t) { return createUnderTorchrun(4, MFSDP_BACKEND_CUDA, 5000); }, 30000);
  for (int r = 0; r < 2; ++r)
    EXPECT_TRUE(contains(run.answers[r], std::to_string(MFSDP_ERROR_PLAN) +
                                             ": this library was built for a plan of 4 "
                                             "ranks, but WORLD_SIZE is 2"))
        << run.answers[r];
}

TEST(Torchrun, BadConfigIsNamed) {
  Plan p(1);
  mfsdp_config config = MFSDP_CONFIG_INITIALIZER;
  config.bootstrap = 7;
  mfsdp_step *step = nullptr;
  mfsdp_status st = mfsdp_create_with_config(&p.plan, &config, &step);
  EXPECT_EQ(st, MFSDP_ERROR_INVALID);
  EXPECT_TRUE(contains(mfsdp_last_error(step), "unknown bootstrap 7 in mfsdp_config"))
      << mfsdp_last_error(step);
  mfsdp_destroy(step);
  config.bootstrap = MFSDP_BOOTSTRAP_TORCHRUN;
  config.bootstrap_timeout_ms = -5;
  st = mfsdp_create_with_config(&p.plan, &config, &step);
  EXPECT_EQ(st, MFSDP_ERROR_INVALID);
  EXPECT_TRUE(contains(mfsdp_last_error(step), "bootstrap_timeout_ms is -5"))
      << mfsdp_last_error(step);
  mfsdp_destroy(step);
}
