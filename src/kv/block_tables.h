// Paged KV-cache bookkeeping: fixed-size blocks, one block table per sequence and
// layer group, reference-counted blocks for forks (copy on write).
//
// Layers are grouped by attention kind (Gemma 4: one group for full-attention
// layers, one for sliding-window layers). All layers of a group share the block
// ids, so one table per (group, sequence) addresses every layer's pool of that
// group: layer pool offset of position p = table[p / block_size] · block_size +
// p % block_size. This class holds no tensor memory; the context owns the pools
// and applies the block copies this class asks for.
//
// Sliding groups release blocks that no future query can see: after a sequence
// reaches length n, a block whose last position is < n − window is freed and its
// table entry becomes −1 (the query at n sees keys from n − window + 1; one position
// more stays so that truncating the newest position always succeeds).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace hf2q::kv {

struct GroupSpec {
    int32_t window = 0;    // 0: full attention (keeps every block)
    int64_t n_blocks = 0;  // physical blocks in this group's pools
};

struct TablesOptions {
    int32_t block_size = 16;
    int32_t n_seq_max = 1;
    int32_t n_ctx = 4096;  // max positions per sequence
    std::vector<GroupSpec> groups;
};

// A block to copy in every pool of `group` before new tokens are written.
struct BlockCopy {
    int32_t group;
    int32_t src;
    int32_t dst;
};

class BlockTables {
public:
    explicit BlockTables(const TablesOptions& opts);

    int32_t block_size() const { return opts_.block_size; }
    int32_t n_groups() const { return static_cast<int32_t>(opts_.groups.size()); }
    int32_t n_seq_max() const { return opts_.n_seq_max; }
    int32_t seq_length(int32_t seq) const;

    // Makes positions [len, len + n) writable for every (seq, n) given, in every
    // group: appends blocks, and replaces shared blocks that will be written by
    // private copies (appended to `copies`). All or nothing: throws hf2q::Error
    // with nothing changed if a sequence would exceed n_ctx or blocks run out.
    void reserve(const std::vector<std::pair<int32_t, int32_t>>& seq_new_tokens,
                 std::vector<BlockCopy>& copies);
    // Blocks `reserve` would allocate in `group` for these appends (new blocks plus
    // copy-on-write replacements); lets a caller check a whole batch up front.
    int64_t blocks_needed(int32_t group, const std::vector<std::pair<int32_t, int32_t>>& seq_new_tokens) const;
    // Records that `seq` now holds `new_len` positions and frees blocks that left
    // every sliding window.
    void commit(int32_t seq, int32_t new_len);

    const std::vector<int32_t>& table(int32_t group, int32_t seq) const;

    void remove(int32_t seq);
    // Keeps positions < pos. Throws if a sliding group already released positions
    // the next token at `pos` would need.
    void truncate(int32_t seq, int32_t pos);
    // dst (emptied first) shares all of src's blocks.
    void fork(int32_t src, int32_t dst);

    int64_t free_blocks(int32_t group) const;
    int32_t ref_count(int32_t group, int32_t block) const;

private:
    struct Group {
        GroupSpec spec;
        std::vector<int32_t> refs;      // per physical block
        std::vector<int32_t> free_list;
        std::vector<std::vector<int32_t>> tables;  // per sequence
    };
    void check_seq(int32_t seq) const;
    int32_t alloc(Group& g);
    void release(Group& g, int32_t block);
    int64_t blocks_needed(const Group& g, int32_t seq, int32_t n_new) const;
    void release_out_of_window(Group& g, int32_t seq, int32_t len);

    TablesOptions opts_;
    std::vector<Group> groups_;
    std::vector<int32_t> lengths_;
};

}  // namespace hf2q::kv
