// Fuzz target: the CLI's option parser (tools/hf2q/args.h) on arbitrary command lines
// (the input split at NUL bytes) with options of every kind, and parse_int_list on the
// whole input. Anything wrong must end in hf2q::Error; after a successful parse every
// number holds a finite value of its type. The parser is tests/cli's (every_option.h).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "every_option.h"  // tests/cli

namespace {

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "fuzz_args: invariant failed: %s\n", what);
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > 4096) return 0;
    const std::string input(reinterpret_cast<const char*>(data), size);
    const std::vector<std::string> args = hf2q::cli::split_list(input, '\0');
    for (const std::string& a : args)
        if (a == "-h" || a == "--help") return 0;  // prints the help text, nothing to check

    hf2q::cli::EveryOption o;
    hf2q::cli::ArgParser p = o.parser();
    try {
        if (p.parse(args) && (!std::isfinite(o.temp) || !std::isfinite(o.scale))) fail("a non-finite number parsed");
    } catch (const hf2q::Error&) {
    } catch (...) {
        fail("an exception other than hf2q::Error");
    }
    try {
        (void)hf2q::cli::parse_int_list(input, "--list");
    } catch (const hf2q::Error&) {
    } catch (...) {
        fail("parse_int_list: an exception other than hf2q::Error");
    }
    return 0;
}
