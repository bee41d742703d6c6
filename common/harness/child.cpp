// A child process under a time limit (harness/child.hpp).
#include "harness/child.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace fa {

ChildRun run_self(const std::vector<std::string>& argv_in, const std::string& fd_env, double timeout_s,
                  const std::function<bool(const std::string&)>& on_record) {
  // Everything exec needs is prepared before fork (the child only dup2s and execs).
  std::vector<std::string> argv_s = argv_in;
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string prefix = fd_env + "=";
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, prefix.c_str(), prefix.size()) != 0) env_s.emplace_back(*e);
  env_s.push_back(prefix + "3");
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);

  int rec[2], out[2];
  if (pipe2(rec, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + strerror(errno));
  const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  std::cout.flush();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + strerror(errno));
  if (pid == 0) {
    // dup2 clears close-on-exec on the copies; a copy onto itself keeps it, so clear it there too.
    if (devnull >= 0) dup2(devnull, 0);
    dup2(out[1], 1);
    dup2(out[1], 2);
    if (rec[1] == 3) fcntl(3, F_SETFD, 0);
    else dup2(rec[1], 3);
    execve("/proc/self/exe", argv.data(), envp.data());
    _exit(127);
  }
  close(rec[1]);
  close(out[1]);
  if (devnull >= 0) close(devnull);

  using clock = std::chrono::steady_clock;
  const auto limit = std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(timeout_s));
  auto deadline = clock::now() + limit;
  ChildRun res;
  std::string rbuf;  // records not yet a whole line
  bool rec_open = true, out_open = true;
  while (rec_open || out_open) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
    if (left <= 0) {
      kill(pid, SIGKILL);
      res.killed = true;
      break;
    }
    pollfd fds[2] = {{rec_open ? rec[0] : -1, POLLIN, 0}, {out_open ? out[0] : -1, POLLIN, 0}};
    const int n = poll(fds, 2, int(std::min<long long>(left, 1000)));
    if (n < 0 && errno != EINTR) break;
    char buf[4096];
    if (fds[1].revents) {
      const ssize_t got = read(out[0], buf, sizeof buf);
      if (got <= 0) out_open = false;
      else {
        res.output.append(buf, size_t(got));
        if (res.output.size() > 8192) res.output.erase(0, res.output.size() - 4096);
      }
    }
    if (fds[0].revents) {
      const ssize_t got = read(rec[0], buf, sizeof buf);
      if (got <= 0) rec_open = false;
      else rbuf.append(buf, size_t(got));
      for (size_t nl; (nl = rbuf.find('\n')) != std::string::npos;) {
        const std::string line = rbuf.substr(0, nl);
        rbuf.erase(0, nl + 1);
        if (on_record(line)) {
          res.output.clear();
          deadline = clock::now() + limit;
        }
      }
    }
  }
  waitpid(pid, &res.status, 0);
  close(rec[0]);
  close(out[0]);
  return res;
}

std::string signal_text(int sig) {
  const char* name = sig == SIGSEGV ? "SIGSEGV" : sig == SIGABRT ? "SIGABRT" : sig == SIGBUS ? "SIGBUS"
                   : sig == SIGFPE ? "SIGFPE" : sig == SIGILL ? "SIGILL" : sig == SIGKILL ? "SIGKILL" : "";
  std::ostringstream os;
  os << "signal " << sig;
  if (*name) os << " (" << name << ", " << strsignal(sig) << ")";
  return os.str();
}

// The last few lines of what a child printed, for a crash message.
std::string tail_lines(const std::string& text, int n) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) lines.push_back(l);
  std::string out;
  for (size_t i = lines.size() > size_t(n) ? lines.size() - n : 0; i < lines.size(); ++i)
    out += (out.empty() ? "" : " | ") + lines[i];
  return out;
}

}  // namespace fa
