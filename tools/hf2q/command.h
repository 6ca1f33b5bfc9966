// Subcommand registry of the hf2q CLI. Each cmd_*.cpp file registers one command:
//
//   static int run_info(const std::vector<std::string>& args);
//   HF2Q_COMMAND(info, "show a GGUF file's metadata and tensors", run_info);
//
// `args` excludes the program and command names. A command returns the exit code;
// hf2q::Error escaping it is printed as "hf2q <cmd>: error: ..." with exit code 1.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace hf2q::cli {

using CommandFn = std::function<int(const std::vector<std::string>&)>;

struct Command {
    std::string name;
    std::string summary;
    CommandFn fn;
};

std::vector<Command>& command_registry();

struct CommandRegistrar {
    CommandRegistrar(std::string name, std::string summary, CommandFn fn) {
        command_registry().push_back({std::move(name), std::move(summary), std::move(fn)});
    }
};

#define HF2Q_COMMAND(name, summary, fn) \
    static ::hf2q::cli::CommandRegistrar hf2q_command_registrar_##name(#name, summary, fn)

}  // namespace hf2q::cli
