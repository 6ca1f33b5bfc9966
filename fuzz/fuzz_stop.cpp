// Fuzz target: the stop-string matcher (src/runtime/stop.h) on arbitrary text and stop
// strings, against a direct search: the emitted text (every feed() result, then
// flush() when nothing matched) must be the text up to the stop string completed first
// (the match ending earliest; ties: the one starting earliest, then the one listed
// first), whatever the piece length, and stopped() / matched() must name that string.
// Input: byte 0 holds the number of stop strings (bits 0-1) and the piece length (bits
// 2-5, plus one); then each stop string as a length byte (1-8, from its low 3 bits, plus
// one) and its bytes; the rest is the text.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/stop.h"

namespace {

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "fuzz_stop: invariant failed: %s\n", what);
    std::abort();
}

// The stop string completed first in text (-1: none), and where it starts.
int first_match(std::string_view text, const std::vector<std::string>& stops, size_t& start) {
    for (size_t end = 1; end <= text.size(); ++end) {
        int best = -1;
        for (size_t i = 0; i < stops.size(); ++i) {
            const std::string& s = stops[i];
            if (s.size() > end || text.substr(end - s.size(), s.size()) != s) continue;
            if (best < 0 || s.size() > stops[static_cast<size_t>(best)].size()) best = static_cast<int>(i);
        }
        if (best >= 0) {
            start = end - stops[static_cast<size_t>(best)].size();
            return best;
        }
    }
    return -1;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1 || size > 4096) return 0;
    const size_t n_stops = data[0] & 3, step = static_cast<size_t>((data[0] >> 2) & 15) + 1;
    size_t pos = 1;
    std::vector<std::string> stops;
    for (size_t i = 0; i < n_stops; ++i) {
        if (pos >= size) return 0;
        const size_t len = static_cast<size_t>(data[pos] & 7) + 1;
        if (pos + 1 + len > size) return 0;
        stops.emplace_back(reinterpret_cast<const char*>(data + pos + 1), len);
        pos += 1 + len;
    }
    const std::string_view text(reinterpret_cast<const char*>(data + pos), size - pos);
    size_t start = 0;
    const int want = first_match(text, stops, start);
    const std::string expected(want >= 0 ? text.substr(0, start) : text);

    hf2q::runtime::StopMatcher m(stops);
    std::string got;
    try {
        for (size_t i = 0; i < text.size() && !m.stopped(); i += step) got += m.feed(text.substr(i, step));
        if (!m.stopped()) got += m.flush();
    } catch (...) {
        fail("the matcher threw");
    }
    if (got != expected) fail("emitted text differs from the direct search");
    if (m.stopped() != (want >= 0)) fail("stopped() differs");
    if (want >= 0 && m.matched() != stops[static_cast<size_t>(want)]) fail("matched() names another string");
    return 0;
}
