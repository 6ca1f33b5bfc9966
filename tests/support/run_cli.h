// Runs the built hf2q CLI from a test (end-to-end tests of a command; they report
// SKIPPED where the CLI has not been built).
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace hf2q::test {

inline const std::string& hf2q_cli_path() {
    static const std::string path = std::string(HF2Q_BINARY_DIR) + "/bin/hf2q";
    return path;
}

struct CliResult {
    int code;         // the exit status, -1 where the command did not exit normally
    std::string out;  // stdout
};

// `hf2q <command> <args>` with stderr discarded.
inline CliResult run_cli(const std::string& command, const std::string& args) {
    const std::string cmd = "'" + hf2q_cli_path() + "' " + command + " " + args + " 2>/dev/null";
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return {-1, ""};
    std::string out;
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    const int status = pclose(p);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace hf2q::test
