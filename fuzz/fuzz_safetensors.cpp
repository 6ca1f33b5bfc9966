// libFuzzer target: the safetensors header parser (parse_safetensors) on arbitrary
// bytes, then a read of every accepted tensor's first and last byte. Only hf2q::Error
// may escape the parser; the sanitizers catch the rest (out-of-range data pointers
// included, since the buffer is exactly the input).
#include <cstddef>
#include <cstdint>

#include "convert/safetensors.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        auto ts = hf2q::convert::parse_safetensors(data, size, "<fuzz>");
        volatile uint64_t sink = 0;
        for (const auto& t : ts) {
            sink = sink + t.n_elements() + t.shape.size();
            if (t.nbytes() > 0) sink = sink + t.data[0] + t.data[t.nbytes() - 1];
        }
        (void)sink;
    } catch (const hf2q::Error&) {
    }
    return 0;
}
