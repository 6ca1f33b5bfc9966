// Fuzz target: the CLI's option parser (tools/hf2q/args.h) on arbitrary command lines
// (the input split at NUL bytes) with options of every kind, and parse_int_list on the
// whole input. Anything wrong must end in hf2q::Error; after a successful parse every
// number holds a finite value of its type.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "args.h"
#include "core/error.h"

namespace {

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "fuzz_args: invariant failed: %s\n", what);
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > 4096) return 0;
    const std::string input(reinterpret_cast<const char*>(data), size);
    std::vector<std::string> args;
    std::string cur;
    for (char c : input) {
        if (c == '\0') {
            args.push_back(cur);
            cur.clear();
        } else {
            cur += c;
        }
    }
    args.push_back(cur);
    for (const std::string& a : args)
        if (a == "-h" || a == "--help") return 0;  // prints the help text, nothing to check

    std::string model, name;
    int32_t n = 0;
    int64_t big = 0;
    uint64_t count = 0;
    float temp = 0.0f;
    double scale = 0.0;
    bool json = false;
    std::vector<std::string> stops;
    std::string file;
    hf2q::cli::ArgParser p("fuzz", "[options]", "every option kind");
    p.option("-m,--model", "FILE", "model", &model, true);
    p.option("--name", "S", "a string", &name);
    p.option("-n,--n-predict", "N", "an int32", &n);
    p.option("--big", "N", "an int64", &big);
    p.option("--count", "N", "a uint64", &count);
    p.option("--temp", "T", "a float", &temp);
    p.option("--scale", "X", "a double", &scale);
    p.flag("--json", "a flag", &json);
    p.option("--stop", "S", "repeatable", &stops);
    p.positional("FILE", "a positional", &file, false);
    try {
        if (p.parse(args) && (!std::isfinite(temp) || !std::isfinite(scale))) fail("a non-finite number parsed");
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
