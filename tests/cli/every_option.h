// A parser with an option of every kind ArgParser takes (tools/hf2q/args.h), shared by
// tests/cli/args_test.cpp and fuzz/fuzz_args.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "args.h"

namespace hf2q::cli {

struct EveryOption {
    std::string model, name = "x";
    int32_t n = 4;
    int64_t big = 0;
    uint64_t count = 0;
    float temp = 0.8f;
    double scale = 1.0;
    bool json = false;
    std::vector<std::string> stops;
    std::string file;

    // The parser writes into this object, which must outlive it.
    ArgParser parser() {
        ArgParser p("test", "[options]", "A parser of every option kind.");
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
        return p;
    }
};

}  // namespace hf2q::cli
