#include "gguf/summary.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace hf2q::gguf {

std::string llama_ftype_name(uint32_t ftype) {
    static constexpr std::string_view kNames[] = {
        "ALL_F32",        "MOSTLY_F16",     "MOSTLY_Q4_0",    "MOSTLY_Q4_1",     "",
        "",               "",               "MOSTLY_Q8_0",    "MOSTLY_Q5_0",     "MOSTLY_Q5_1",
        "MOSTLY_Q2_K",    "MOSTLY_Q3_K_S",  "MOSTLY_Q3_K_M",  "MOSTLY_Q3_K_L",   "MOSTLY_Q4_K_S",
        "MOSTLY_Q4_K_M",  "MOSTLY_Q5_K_S",  "MOSTLY_Q5_K_M",  "MOSTLY_Q6_K",     "MOSTLY_IQ2_XXS",
        "MOSTLY_IQ2_XS",  "MOSTLY_Q2_K_S",  "MOSTLY_IQ3_XS",  "MOSTLY_IQ3_XXS",  "MOSTLY_IQ1_S",
        "MOSTLY_IQ4_NL",  "MOSTLY_IQ3_S",   "MOSTLY_IQ3_M",   "MOSTLY_IQ2_S",    "MOSTLY_IQ2_M",
        "MOSTLY_IQ4_XS",  "MOSTLY_IQ1_M",   "MOSTLY_BF16",    "",                "",
        "",               "MOSTLY_TQ1_0",   "MOSTLY_TQ2_0",   "MOSTLY_MXFP4_MOE", "MOSTLY_NVFP4",
        "MOSTLY_Q1_0",
    };
    constexpr uint32_t kGuessed = 1024;
    const uint32_t id = ftype & ~kGuessed;
    std::string name = id < std::size(kNames) && !kNames[id].empty() ? std::string(kNames[id]) : "unknown";
    if (ftype & kGuessed) name += " (guessed)";
    return name;
}

Summary summarize(const File& f) {
    Summary s;
    for (const auto& t : f.tensors()) {
        const auto n = static_cast<uint64_t>(t.n_elements());
        s.n_tensors += 1;
        s.n_elements += n;
        s.n_bytes += t.nbytes;
        auto it = std::find_if(s.by_type.begin(), s.by_type.end(),
                               [&](const TypeTotals& x) { return x.type == t.type; });
        if (it == s.by_type.end()) {
            s.by_type.push_back({t.type});
            it = s.by_type.end() - 1;
        }
        it->n_tensors += 1;
        it->n_elements += n;
        it->n_bytes += t.nbytes;
    }
    std::sort(s.by_type.begin(), s.by_type.end(), [](const TypeTotals& a, const TypeTotals& b) {
        return static_cast<uint32_t>(a.type) < static_cast<uint32_t>(b.type);
    });
    return s;
}

namespace {
std::string scaled(double v, const char* const* units, size_t n_units, double base, const char* fmt) {
    size_t u = 0;
    while (v >= base && u + 1 < n_units) {
        v /= base;
        ++u;
    }
    char buf[64];
    if (u == 0) {
        std::snprintf(buf, sizeof buf, "%.0f%s%s", v, units[0][0] ? " " : "", units[0]);
    } else {
        std::snprintf(buf, sizeof buf, fmt, v, units[u]);
    }
    return buf;
}
}  // namespace

std::string human_count(uint64_t n) {
    static const char* const kUnits[] = {"", "K", "M", "B", "T"};
    return scaled(static_cast<double>(n), kUnits, std::size(kUnits), 1000.0, "%.1f %s");
}

std::string human_bytes(uint64_t n) {
    static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    return scaled(static_cast<double>(n), kUnits, std::size(kUnits), 1024.0, "%.2f %s");
}

}  // namespace hf2q::gguf
