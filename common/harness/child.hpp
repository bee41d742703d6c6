// A child process under a time limit: this program run again (/proc/self/exe) with other
// arguments, its stdout and stderr captured, and a pipe for records on file descriptor 3 (named to
// the child by an environment variable). The grader's isolation (harness/grade.hpp) is built on it;
// nothing here knows about grading. Linux only (fork, exec, poll, waitpid).
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace fa {

struct ChildRun {
  bool killed = false;  // the time limit ran out and the child was killed
  int status = 0;       // waitpid's status (WIFSIGNALED, WEXITSTATUS ...)
  std::string output;   // the last few KiB it printed since the clock was last restarted
};

// Runs /proc/self/exe with `argv` (argv[0] included) and the environment plus `fd_env`=3. Each whole
// line the child writes to descriptor 3 goes to `on_record`; when that returns true the clock
// restarts (another `timeout_s`) and the captured output is forgotten — a child that reports
// progress has a time limit per piece of work, not in all. Throws std::runtime_error when the
// child cannot be started.
ChildRun run_self(const std::vector<std::string>& argv, const std::string& fd_env, double timeout_s,
                  const std::function<bool(const std::string&)>& on_record);

// "signal 11 (SIGSEGV, Segmentation fault)".
std::string signal_text(int sig);
// The last `n` non-empty lines of `text`, joined by " | " (for a crash message).
std::string tail_lines(const std::string& text, int n);

}  // namespace fa
