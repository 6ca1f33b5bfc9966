// libFuzzer target: gguf::File::parse on arbitrary bytes, then every accessor on every
// value and tensor. Only hf2q::Error may escape parse; sanitizers catch the rest.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf/summary.h"

using namespace hf2q::gguf;

namespace {

volatile uint64_t g_sink;  // keeps the reads below from being optimized away

void touch(const Value& v) {
    uint64_t h = static_cast<uint64_t>(v.type()) + v.array_size();
    h += v.to_display_string(4).size();
    try { h += v.as_u32("k"); } catch (const hf2q::Error&) {}
    try { h += static_cast<uint64_t>(v.as_i32("k")); } catch (const hf2q::Error&) {}
    try { h += v.as_u64("k"); } catch (const hf2q::Error&) {}
    try { h += static_cast<uint64_t>(v.as_f32("k") != 0); } catch (const hf2q::Error&) {}
    try { h += v.as_bool("k"); } catch (const hf2q::Error&) {}
    try { h += v.as_string("k").size(); } catch (const hf2q::Error&) {}
    try { h += v.as_int_array("k").size(); } catch (const hf2q::Error&) {}
    try { h += v.as_f32_array("k").size(); } catch (const hf2q::Error&) {}
    try { h += v.as_bool_array("k").size(); } catch (const hf2q::Error&) {}
    try {
        for (const auto& s : v.as_string_array("k")) h += s.size();
    } catch (const hf2q::Error&) {}
    g_sink = h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::unique_ptr<File> f;
    try {
        f = File::parse(data, size, "fuzz");
    } catch (const hf2q::Error&) {
        return 0;
    }
    uint64_t h = f->version() + f->alignment() + f->data_offset();
    for (const auto& kv : f->metadata()) {
        touch(kv.value);
        h += f->find(kv.key) != nullptr;
        try { h += f->get_per_layer(kv.key, 3).size(); } catch (const hf2q::Error&) {}
    }
    for (const auto& t : f->tensors()) {
        h += static_cast<uint64_t>(t.n_elements()) + t.row_bytes() + t.nbytes;
        if (f->find_tensor(t.name) != &t) __builtin_trap();
        // Every tensor byte must lie inside the input.
        if (t.data < data || t.data + t.nbytes > data + size) __builtin_trap();
        if (t.nbytes) h += t.data[0] + t.data[t.nbytes - 1];
    }
    h += summarize(*f).n_bytes;
    g_sink = h;
    return 0;
}
