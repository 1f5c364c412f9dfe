//===- FreePort.h - A TCP port for tests of the bootstrap -----------------===//
#ifndef MFSDP_TEST_UNIT_FREEPORT_H
#define MFSDP_TEST_UNIT_FREEPORT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace mfsdp::test {

/// A loopback port that was free a moment ago (bound to 0, then closed).
inline int freePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

} // namespace mfsdp::test

#endif // MFSDP_TEST_UNIT_FREEPORT_H
