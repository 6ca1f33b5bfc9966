// The device flags shared by `generate`, `chat` and `bench`: arithmetic precision,
// CUDA graphs and the size of the KV cache, bound to one DeviceFlags.
#pragma once

#include <string>

#include "args.h"
#include "core/error.h"
#include "core/progress.h"
#include "hf2q/engine.h"

namespace hf2q::cli {

struct DeviceFlags {
    std::string precision = "tensor-cores";
    bool no_graphs = false;
    bool serial_branches = false;
    bool no_head_copy = false;
    bool no_expert_copy = false;
    std::string batch_copy = "auto";
    int64_t kv_tokens = 0;
    double kv_fraction = 0.0;
    std::string cache_type = "f16";
};

// The value of --backend; fails with the accepted names otherwise. Commands call it
// right after parsing (so a typo fails before a model loads) and again to fill
// ContextOptions.
inline BackendKind parse_backend(const std::string& name) {
    if (name == "cpu") return BackendKind::cpu;
    if (name == "cuda") return BackendKind::cuda;
    fail("--backend must be cpu or cuda, got '", name, "'");
}

inline void add_device_flags(ArgParser& p, DeviceFlags& d) {
    p.option("--precision", "P",
             "device arithmetic: tensor-cores (BF16/F16 operands, 8-bit activations in decode matmuls, f32 accumulation) or f32 (reference, slower)",
             &d.precision);
    p.flag("--no-graphs", "run decode steps op by op instead of replaying CUDA graphs", &d.no_graphs);
    p.flag("--serial-branches",
           "run a MoE layer's routed experts after its dense MLP instead of beside it on a second CUDA stream, and a batch's q/k/v products one after the other",
           &d.serial_branches);
    p.flag("--no-head-copy",
           "do not keep a second copy of a Q6_K LM head in the layout CUDA decode reads faster (saves its size in GPU memory, 0.6 GB for the 26B-A4B; one-sequence decode 2-3 % slower)",
           &d.no_head_copy);
    p.flag("--no-expert-copy",
           "do not keep second copies of the experts in the layouts batched CUDA decode reads faster: Q4_K with their scales decoded, Q5_0 with their blocks reordered (saves the copies' GPU memory, 9.5 + 2.8 GB for the 26B-A4B; 64 sequences about 3.5 % slower; the Q4_K copy's scales are rounded to f16)",
           &d.no_expert_copy);
    p.option("--batch-copy", "MODE",
             "BF16 copies of the dense weights and the LM head in GPU memory, so batches of 17+ tokens (many sequences, prompt chunks) skip expanding them on every step (2 bytes per value: 4.8 GB for the 26B-A4B; 64 sequences 16 % faster): on, off, or auto (on when the copies take at most a quarter of the GPU memory left after the weights)",
             &d.batch_copy);
    p.option("--kv-size", "N", "KV cache capacity in tokens, shared by all sequences (0: every sequence full)",
             &d.kv_tokens);
    p.option("--kv-fraction", "F", "KV cache from this fraction (0, 1] of the GPU memory left after the weights",
             &d.kv_fraction);
    p.option("--cache-type", "T",
             "KV cache element type for K and V: f16 (default, as llama.cpp's -ctk/-ctv f16), f32 (twice the memory), int8 (8-bit codes with a scale per position and KV head, like llama.cpp's q8_0: about half the memory and the bytes decode reads; less accurate than f16, about three times closer to it than fp8) or fp8 (FP8 E4M3 without a scale, as vLLM's --kv-cache-dtype fp8: half the memory, 3 mantissa bits, so less accurate: see docs/performance.md)",
             &d.cache_type);
}

// Fails on a bad value of any device flag, naming the flag: commands call it right
// after parsing, with parse_backend, so a typo fails before a model loads (the
// context would reject the same values only after).
inline void check_device_flags(const DeviceFlags& d) {
    if (d.precision != "tensor-cores" && d.precision != "f32")
        fail("--precision must be tensor-cores or f32, got '", d.precision, "'");
    if (d.kv_tokens < 0) fail("--kv-size must not be negative, got ", d.kv_tokens);
    if (!(d.kv_fraction >= 0.0 && d.kv_fraction <= 1.0)) fail("--kv-fraction must be in (0, 1], got ", d.kv_fraction);
    if (d.kv_tokens > 0 && d.kv_fraction > 0) fail("give --kv-size or --kv-fraction, not both");
    if (d.cache_type != "f16" && d.cache_type != "f32" && d.cache_type != "int8" && d.cache_type != "fp8")
        fail("--cache-type must be f16, f32, int8 or fp8, got '", d.cache_type, "'");
    if (d.batch_copy != "auto" && d.batch_copy != "on" && d.batch_copy != "off")
        fail("--batch-copy must be auto, on or off, got '", d.batch_copy, "'");
}

// The model's load options the device flags set.
inline ModelLoadOptions load_options(const DeviceFlags& d) {
    ModelLoadOptions m;
    m.decode_layouts = !d.no_head_copy;
    m.expert_layouts = !d.no_expert_copy;
    m.batch_copy = d.batch_copy == "on" ? BatchCopy::on : d.batch_copy == "off" ? BatchCopy::off : BatchCopy::automatic;
    return m;
}

// ", weight copies X (--batch-copy off, --no-head-copy, --no-expert-copy)" where the context's backend
// keeps copies of weights (ModelLoadOptions), for the commands' context lines.
inline std::string weight_copies_note(const Context& ctx) {
    if (ctx.weight_copy_bytes() == 0) return "";
    return ", weight copies " + format_bytes(ctx.weight_copy_bytes()) +
           " (--batch-copy off, --no-head-copy, --no-expert-copy)";
}

// The KV cache type --cache-type names.
inline KvCacheType cache_type_of(const DeviceFlags& d) {
    return d.cache_type == "f32"    ? KvCacheType::f32
           : d.cache_type == "fp8"  ? KvCacheType::e4m3
           : d.cache_type == "int8" ? KvCacheType::int8
                                    : KvCacheType::f16;
}

inline void apply_device_flags(const DeviceFlags& d, ContextOptions& c) {
    check_device_flags(d);
    c.device_precision = d.precision == "f32" ? DevicePrecision::f32 : DevicePrecision::tensor_cores;
    c.graphs = !d.no_graphs;
    c.concurrent_branches = !d.serial_branches;
    c.kv_tokens = d.kv_tokens;
    c.kv_memory_fraction = d.kv_fraction;
    c.kv_type = cache_type_of(d);
}

}  // namespace hf2q::cli
