#include "ipc/protocol.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace sova::ipc_detail {

bool send_message(int socket, const void* data, std::size_t bytes, const int* fds, std::size_t nfds) noexcept {
  iovec iov{const_cast<void*>(data), bytes};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kChunksPerMessage)];
  if (nfds > kChunksPerMessage) return false;
  if (nfds > 0) {
    std::memset(control, 0, sizeof control);
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
  }
  ssize_t sent;
  do {
    sent = ::sendmsg(socket, &msg, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  return sent == static_cast<ssize_t>(bytes);
}

long receive_message(int socket, void* data, std::size_t capacity, int* fds, std::size_t max_fds,
                     std::size_t* nfds) noexcept {
  *nfds = 0;
  iovec iov{data, capacity};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kChunksPerMessage)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t got;
  do {
    got = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
  } while (got < 0 && errno == EINTR);
  if (got < 0) return -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < n; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      if (*nfds < max_fds) {
        fds[(*nfds)++] = fd;
      } else {
        ::close(fd);  // more than asked for: not ours to keep
      }
    }
  }
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) return -1;
  return static_cast<long>(got);
}

long receive_message_within(int socket, int wait_ms, void* data, std::size_t capacity, int* fds,
                            std::size_t max_fds, std::size_t* nfds) noexcept {
  *nfds = 0;
  pollfd p{socket, POLLIN, 0};
  int ready;
  do {
    ready = ::poll(&p, 1, wait_ms);  // an EINTR restarts the whole wait: at worst a longer one
  } while (ready < 0 && errno == EINTR);
  if (ready <= 0) return -1;  // nothing came in time (or poll failed)
  return receive_message(socket, data, capacity, fds, max_fds, nfds);
}

}  // namespace sova::ipc_detail
