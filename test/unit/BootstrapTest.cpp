//===- BootstrapTest.cpp - Ranks from the torchrun environment ------------===//
//
// The variables are read and checked with messages that name them; the
// blob broadcast runs between real processes (fork) on localhost, and a
// rank that never arrives ends in an error (after the timeout; a hang would
// be caught by ctest's own timeout).
//
//===----------------------------------------------------------------------===//
#include "mfsdp/runtime/Bootstrap.h"

#include "FreePort.h"

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>

using namespace mfsdp::rt;

namespace {

EnvLookup fromMap(std::map<std::string, std::string> vars) {
  return [vars](const char *name, std::string &value) {
    auto it = vars.find(name);
    if (it == vars.end())
      return false;
    value = it->second;
    return true;
  };
}

std::map<std::string, std::string> good() {
  return {{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"},
          {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"}};
}

std::string readError(std::map<std::string, std::string> vars) {
  RankEnv env;
  std::string error;
  EXPECT_FALSE(readRankEnv(fromMap(vars), env, error));
  return error;
}

using mfsdp::test::freePort;

} // namespace

TEST(Bootstrap, ReadsTheTorchrunVariables) {
  RankEnv env;
  std::string error;
  ASSERT_TRUE(readRankEnv(fromMap(good()), env, error)) << error;
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world, 8);
  EXPECT_EQ(env.localRank, 1);
  EXPECT_EQ(env.masterAddr, "node0");
  EXPECT_EQ(env.masterPort, 29500);
  // MFSDP_MASTER_PORT, when set, replaces MASTER_PORT (which a
  // torch.distributed store may hold), and is checked like it.
  auto own = good();
  own["MFSDP_MASTER_PORT"] = "29611";
  ASSERT_TRUE(readRankEnv(fromMap(own), env, error)) << error;
  EXPECT_EQ(env.masterPort, 29611);
  own["MFSDP_MASTER_PORT"] = "0";
  EXPECT_EQ(readError(own), "MFSDP_MASTER_PORT=0 is out of range; expected 1..65535");
  // LOCAL_RANK is optional: it defaults to RANK.
  auto vars = good();
  vars.erase("LOCAL_RANK");
  ASSERT_TRUE(readRankEnv(fromMap(vars), env, error)) << error;
  EXPECT_EQ(env.localRank, 3);
}

TEST(Bootstrap, NamesTheBadVariable) {
  auto vars = good();
  vars.erase("RANK");
  EXPECT_NE(readError(vars).find("RANK is not set"), std::string::npos);
  vars = good();
  vars["RANK"] = "8";
  EXPECT_EQ(readError(vars), "RANK=8 is out of range; expected 0..7");
  vars = good();
  vars["WORLD_SIZE"] = "eight";
  EXPECT_EQ(readError(vars), "WORLD_SIZE='eight' is not an integer");
  vars = good();
  vars["WORLD_SIZE"] = "0";
  EXPECT_EQ(readError(vars), "WORLD_SIZE=0 is out of range; expected 1..16777216");
  vars = good();
  vars["MASTER_PORT"] = "70000";
  EXPECT_EQ(readError(vars), "MASTER_PORT=70000 is out of range; expected 1..65535");
  vars = good();
  vars["MASTER_ADDR"] = "";
  EXPECT_NE(readError(vars).find("MASTER_ADDR is not set (or empty)"), std::string::npos);
  vars = good();
  vars["LOCAL_RANK"] = "-1";
  EXPECT_EQ(readError(vars), "LOCAL_RANK=-1 is out of range; expected 0..7");
}

TEST(Bootstrap, BroadcastsABlobToEveryProcess) {
  const int world = 4, port = freePort();
  std::vector<uint8_t> want(128);
  for (size_t i = 0; i < want.size(); ++i)
    want[i] = static_cast<uint8_t>(i * 37 + 11);
  std::vector<pid_t> children;
  for (int r = 1; r < world; ++r) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      RankEnv env{r, world, r, "127.0.0.1", port};
      std::vector<uint8_t> got;
      std::string error;
      bool ok = broadcastBlob(env, got, 10000, error);
      _exit(ok && got == want ? 0 : 1);
    }
    children.push_back(pid);
  }
  RankEnv env{0, world, 0, "127.0.0.1", port};
  std::vector<uint8_t> blob = want;
  std::string error;
  EXPECT_TRUE(broadcastBlob(env, blob, 10000, error)) << error;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "a rank did not receive the blob";
  }
}

TEST(Bootstrap, AMissingRankIsAnErrorNotAHang) {
  const int port = freePort();
  std::vector<uint8_t> blob(16, 1);
  std::string error;
  // Rank 0 waits for 2 ranks that never come.
  EXPECT_FALSE(broadcastBlob(RankEnv{0, 3, 0, "127.0.0.1", port}, blob, 300, error));
  EXPECT_NE(error.find("rank 0: only 0 of 2 ranks connected to port"), std::string::npos)
      << error;
  // Rank 1 looks for a rank 0 that is not there.
  error.clear();
  EXPECT_FALSE(broadcastBlob(RankEnv{1, 3, 1, "127.0.0.1", port}, blob, 300, error));
  EXPECT_NE(error.find("rank 1: cannot reach rank 0 at 127.0.0.1:" + std::to_string(port) +
                       " within 300 ms"),
            std::string::npos)
      << error;
}
