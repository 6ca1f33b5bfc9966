// hf2q: Gemma 4 inference engine and model converter. Dispatches to subcommands.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "command.h"
#include "core/error.h"
#include "core/interrupt_cleanup.h"

namespace hf2q::cli {
std::vector<Command>& command_registry() {
    static std::vector<Command> r;
    return r;
}
}  // namespace hf2q::cli

static void print_usage() {
    auto cmds = hf2q::cli::command_registry();
    std::sort(cmds.begin(), cmds.end(), [](auto& a, auto& b) { return a.name < b.name; });
    std::printf(
        "hf2q %s: Gemma 4 inference engine and Hugging Face -> GGUF converter\n\n"
        "usage: hf2q <command> [options]\n\ncommands:\n",
        HF2Q_VERSION);
    for (auto& c : cmds) std::printf("  %-12s %s\n", c.name.c_str(), c.summary.c_str());
    std::printf("\n'hf2q <command> --help' describes a command's options.\n");
}

int main(int argc, char** argv) {
    if (argc < 2 || std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help") {
        print_usage();
        return argc < 2 ? 2 : 0;
    }
    hf2q::install_interrupt_cleanup();  // Ctrl-C removes half-written temporary outputs
    std::string name = argv[1];
    if (name == "--version" || name == "version") {
        std::printf("hf2q %s\n", HF2Q_VERSION);
        return 0;
    }
    for (auto& c : hf2q::cli::command_registry()) {
        if (c.name != name) continue;
        std::vector<std::string> args(argv + 2, argv + argc);
        try {
            return c.fn(args);
        } catch (const hf2q::Error& e) {
            std::fprintf(stderr, "hf2q %s: error: %s\n", name.c_str(), e.what());
            return 1;
        } catch (const std::bad_alloc&) {
            std::fprintf(stderr, "hf2q %s: error: out of memory\n", name.c_str());
            return 1;
        } catch (const std::exception& e) {
            std::fprintf(stderr, "hf2q %s: error: %s\n", name.c_str(), e.what());
            return 1;
        }
    }
    std::fprintf(stderr, "hf2q: unknown command '%s'\n\n", name.c_str());
    print_usage();
    return 2;
}
