// Flat open-addressing hash tables used by the tokenizer's hot loops (internal).
//
// SymbolTable: string -> symbol id. Slots hold {hash tag, id}; the text of id lives in
//   `texts` (views into storage owned by the caller, which must outlive the table).
// MergeTable:  (left id << 32 | right id) -> {rank, result id}.
// Both use linear probing over a power-of-two array kept at most half full, so a lookup
// touches one or two cache lines.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

namespace hf2q::tokenizer {

class SymbolTable {
  public:
    int32_t size() const { return static_cast<int32_t>(texts_.size()); }
    std::string_view text(int32_t id) const { return texts_[id]; }

    int32_t find(std::string_view s) const {
        if (slots_.empty()) return -1;
        const uint64_t h = hash(s);
        const uint32_t tag = static_cast<uint32_t>(h >> 32);
        for (size_t i = h & mask_;; i = (i + 1) & mask_) {
            const Slot& sl = slots_[i];
            if (sl.id < 0) return -1;
            if (sl.tag == tag && texts_[sl.id] == s) return sl.id;
        }
    }

    // Appends `s` (which must not be present) with the next id; returns that id.
    int32_t add(std::string_view s) {
        if ((texts_.size() + 1) * 2 > slots_.size()) grow();
        const int32_t id = static_cast<int32_t>(texts_.size());
        texts_.push_back(s);
        place(hash(s), id);
        return id;
    }

    void reserve(size_t n) {
        texts_.reserve(n);
        size_t cap = 16;
        while (cap < 2 * n) cap *= 2;
        if (cap > slots_.size()) rehash(cap);
    }

  private:
    struct Slot {
        uint32_t tag;
        int32_t id;  // -1: empty
    };
    static uint64_t hash(std::string_view s) {
        uint64_t h = std::hash<std::string_view>{}(s);
        h ^= h >> 29;
        h *= 0xbf58476d1ce4e5b9ull;  // spread bits for the tag and the index
        h ^= h >> 32;
        return h;
    }
    void place(uint64_t h, int32_t id) {
        size_t i = h & mask_;
        while (slots_[i].id >= 0) i = (i + 1) & mask_;
        slots_[i] = {static_cast<uint32_t>(h >> 32), id};
    }
    void grow() { rehash(slots_.empty() ? 16 : slots_.size() * 2); }
    void rehash(size_t cap) {
        slots_.assign(cap, Slot{0, -1});
        mask_ = cap - 1;
        for (int32_t id = 0; id < static_cast<int32_t>(texts_.size()); ++id) {
            place(hash(texts_[id]), id);
        }
    }

    std::vector<std::string_view> texts_;
    std::vector<Slot> slots_;
    size_t mask_ = 0;
};

struct Merge {
    int32_t rank;    // index in tokenizer.ggml.merges (lower merges first)
    int32_t result;  // symbol id of left+right
};

class MergeTable {
  public:
    static uint64_t key(int32_t left, int32_t right) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
               static_cast<uint32_t>(right);
    }

    void reserve(size_t n) {
        size_t cap = 16;
        while (cap < 2 * n) cap *= 2;
        slots_.assign(cap, Slot{kEmpty, {0, 0}});
        mask_ = cap - 1;
        count_ = 0;
    }

    // Inserts unless the key is present (the first, lowest rank wins). The table must
    // have been reserved for at least as many entries as are inserted.
    void insert(uint64_t k, Merge m) {
        for (size_t i = mix(k) & mask_;; i = (i + 1) & mask_) {
            if (slots_[i].key == k) return;
            if (slots_[i].key == kEmpty) {
                slots_[i] = {k, m};
                ++count_;
                return;
            }
        }
    }

    const Merge* find(uint64_t k) const {
        if (slots_.empty()) return nullptr;
        for (size_t i = mix(k) & mask_;; i = (i + 1) & mask_) {
            const Slot& s = slots_[i];
            if (s.key == k) return &s.m;
            if (s.key == kEmpty) return nullptr;
        }
    }

    size_t size() const { return count_; }

  private:
    static constexpr uint64_t kEmpty = ~0ull;  // ids are non-negative int32, never all ones
    struct Slot {
        uint64_t key;
        Merge m;
    };
    static uint64_t mix(uint64_t k) {
        k ^= k >> 33;
        k *= 0xff51afd7ed558ccdull;
        k ^= k >> 33;
        return k;
    }

    std::vector<Slot> slots_;
    size_t mask_ = 0;
    size_t count_ = 0;
};

}  // namespace hf2q::tokenizer
