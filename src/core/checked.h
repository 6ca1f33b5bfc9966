// Overflow-checked integer arithmetic for sizes and offsets read from untrusted input.
#pragma once

#include <cstdint>
#include <optional>

namespace hf2q {

// Returns nullopt on overflow.
inline std::optional<uint64_t> checked_add(uint64_t a, uint64_t b) {
    uint64_t r;
    if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
    return r;
}

inline std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
    uint64_t r;
    if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
    return r;
}

// Rounds x up to a multiple of `align` (a power of two); nullopt on overflow.
inline std::optional<uint64_t> checked_align_up(uint64_t x, uint64_t align) {
    auto r = checked_add(x, align - 1);
    if (!r) return std::nullopt;
    return *r & ~(align - 1);
}

}  // namespace hf2q
