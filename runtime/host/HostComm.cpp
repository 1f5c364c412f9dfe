//===- HostComm.cpp - What the host collectives share ---------------------===//
#include "mfsdp/runtime/HostComm.h"

namespace mfsdp::rt {

namespace {
thread_local std::string lastMessage;
} // namespace

HostRequest::~HostRequest() = default;
HostComm::~HostComm() = default;

const char *HostComm::lastError() { return lastMessage.c_str(); }

int HostComm::fail(int code, const std::string &message) {
  lastMessage = message;
  return code;
}

int HostComm::checkCounts(const char *what, const std::vector<int64_t> &counts,
                          int code) const {
  if (static_cast<int64_t>(counts.size()) == size_)
    return 0;
  return fail(code, std::string(what) + ": " + std::to_string(counts.size()) +
                        " counts for " + std::to_string(size_) + " ranks");
}

int HostComm::checkRoot(const char *what, int root, int code) const {
  if (root >= 0 && root < size_)
    return 0;
  return fail(code, std::string(what) + ": root " + std::to_string(root) +
                        " out of range for " + std::to_string(size_) + " ranks");
}

bool hasGloo() { return MFSDP_HAVE_GLOO != 0; }

#if !MFSDP_HAVE_GLOO
bool createGlooComms(const std::vector<MeshDimSpec> &, const std::vector<std::string> &,
                     ControlPlane &, int, std::vector<std::unique_ptr<HostComm>> &,
                     std::string &error) {
  error = "this libmfsdp_rt was built without gloo (libgloo-dev), which the host "
          "backend's collectives need under the torchrun bootstrap";
  return false;
}
#endif

} // namespace mfsdp::rt
