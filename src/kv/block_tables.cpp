#include "kv/block_tables.h"

#include <algorithm>

#include "core/error.h"

namespace hf2q::kv {

BlockTables::BlockTables(const TablesOptions& opts) : opts_(opts) {
    if (opts.block_size <= 0) fail("KV block size must be positive, got ", opts.block_size);
    if (opts.n_seq_max <= 0) fail("the number of sequences must be positive, got ", opts.n_seq_max);
    if (opts.n_ctx <= 0) fail("the context length must be positive, got ", opts.n_ctx);
    for (const auto& spec : opts.groups) {
        if (spec.n_blocks <= 0 || spec.n_blocks > INT32_MAX)
            fail("KV group block count out of range: ", spec.n_blocks);
        Group g;
        g.spec = spec;
        g.refs.assign(static_cast<size_t>(spec.n_blocks), 0);
        g.free_list.reserve(static_cast<size_t>(spec.n_blocks));
        for (int64_t b = spec.n_blocks - 1; b >= 0; --b) g.free_list.push_back(static_cast<int32_t>(b));
        g.tables.resize(static_cast<size_t>(opts.n_seq_max));
        groups_.push_back(std::move(g));
    }
    lengths_.assign(static_cast<size_t>(opts.n_seq_max), 0);
}

void BlockTables::check_seq(int32_t seq) const {
    if (seq < 0 || seq >= opts_.n_seq_max)
        fail("sequence id ", seq, " out of range [0, ", opts_.n_seq_max, ")");
}

int32_t BlockTables::seq_length(int32_t seq) const {
    check_seq(seq);
    return lengths_[static_cast<size_t>(seq)];
}

const std::vector<int32_t>& BlockTables::table(int32_t group, int32_t seq) const {
    check_seq(seq);
    return groups_.at(static_cast<size_t>(group)).tables[static_cast<size_t>(seq)];
}

int64_t BlockTables::free_blocks(int32_t group) const {
    return static_cast<int64_t>(groups_.at(static_cast<size_t>(group)).free_list.size());
}

int32_t BlockTables::ref_count(int32_t group, int32_t block) const {
    return groups_.at(static_cast<size_t>(group)).refs.at(static_cast<size_t>(block));
}

int32_t BlockTables::alloc(Group& g) {
    HF2Q_ASSERT(!g.free_list.empty());
    int32_t b = g.free_list.back();
    g.free_list.pop_back();
    g.refs[static_cast<size_t>(b)] = 1;
    return b;
}

void BlockTables::release(Group& g, int32_t block) {
    if (block < 0) return;
    int32_t& r = g.refs[static_cast<size_t>(block)];
    HF2Q_ASSERT(r > 0);
    if (--r == 0) g.free_list.push_back(block);
}

// Blocks to allocate in group g for writing positions [len, len + n_new): new
// table entries plus copy-on-write replacements of shared blocks.
int64_t BlockTables::blocks_needed(const Group& g, int32_t seq, int32_t n_new) const {
    const auto& t = g.tables[static_cast<size_t>(seq)];
    int32_t len = lengths_[static_cast<size_t>(seq)];
    int64_t first = len / opts_.block_size;
    int64_t last = (static_cast<int64_t>(len) + n_new - 1) / opts_.block_size;
    int64_t need = 0;
    for (int64_t b = first; b <= last; ++b) {
        if (b >= static_cast<int64_t>(t.size())) ++need;
        else if (t[static_cast<size_t>(b)] >= 0 && g.refs[static_cast<size_t>(t[static_cast<size_t>(b)])] > 1) ++need;
    }
    return need;
}

int64_t BlockTables::blocks_needed(int32_t group,
                                   const std::vector<std::pair<int32_t, int32_t>>& seq_new_tokens) const {
    const Group& g = groups_.at(static_cast<size_t>(group));
    int64_t need = 0;
    for (auto [seq, n] : seq_new_tokens) {
        check_seq(seq);
        if (n > 0) need += blocks_needed(g, seq, n);
    }
    return need;
}

void BlockTables::reserve(const std::vector<std::pair<int32_t, int32_t>>& seq_new_tokens,
                          std::vector<BlockCopy>& copies) {
    // Validate everything first so a failure changes nothing.
    for (auto [seq, n] : seq_new_tokens) {
        check_seq(seq);
        if (n <= 0) continue;
        int64_t end = static_cast<int64_t>(lengths_[static_cast<size_t>(seq)]) + n;
        if (end > opts_.n_ctx)
            fail("sequence ", seq, " would reach ", end, " positions, more than the context size ",
                 opts_.n_ctx, " (raise --ctx-size)");
    }
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
        int64_t need = 0;
        for (auto [seq, n] : seq_new_tokens)
            if (n > 0) need += blocks_needed(groups_[gi], seq, n);
        if (need > static_cast<int64_t>(groups_[gi].free_list.size()))
            fail("KV cache full: the batch needs ", need, " more blocks of ", opts_.block_size,
                 " tokens in layer group ", gi, " but only ", groups_[gi].free_list.size(),
                 " are free (free sequences, lower the batch, or raise the cache size)");
    }
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
        Group& g = groups_[gi];
        for (auto [seq, n] : seq_new_tokens) {
            if (n <= 0) continue;
            auto& t = g.tables[static_cast<size_t>(seq)];
            int32_t len = lengths_[static_cast<size_t>(seq)];
            int64_t first = len / opts_.block_size;
            int64_t last = (static_cast<int64_t>(len) + n - 1) / opts_.block_size;
            for (int64_t b = first; b <= last; ++b) {
                if (b >= static_cast<int64_t>(t.size())) {
                    t.push_back(alloc(g));
                    continue;
                }
                int32_t& entry = t[static_cast<size_t>(b)];
                if (entry >= 0 && g.refs[static_cast<size_t>(entry)] > 1) {
                    int32_t fresh = alloc(g);
                    copies.push_back({static_cast<int32_t>(gi), entry, fresh});
                    release(g, entry);
                    entry = fresh;
                }
            }
        }
    }
}

void BlockTables::release_out_of_window(Group& g, int32_t seq, int32_t len) {
    if (g.spec.window <= 0) return;
    // The next query (position len) sees keys >= len - window + 1; one position more
    // is kept so the newest position can always be truncated away (a pipelined greedy
    // step that was not needed: runtime/generation.cpp). Context's sliding pools hold
    // the window plus a micro-batch plus two blocks, which covers it.
    int64_t first_needed = static_cast<int64_t>(len) - g.spec.window;
    if (first_needed <= 0) return;
    auto& t = g.tables[static_cast<size_t>(seq)];
    int64_t n_free = std::min<int64_t>(first_needed / opts_.block_size, static_cast<int64_t>(t.size()));
    for (int64_t b = 0; b < n_free; ++b) {
        release(g, t[static_cast<size_t>(b)]);
        t[static_cast<size_t>(b)] = -1;
    }
}

void BlockTables::commit(int32_t seq, int32_t new_len) {
    check_seq(seq);
    HF2Q_ASSERT(new_len >= 0 && new_len <= opts_.n_ctx);
    lengths_[static_cast<size_t>(seq)] = new_len;
    for (auto& g : groups_) release_out_of_window(g, seq, new_len);
}

void BlockTables::remove(int32_t seq) {
    check_seq(seq);
    for (auto& g : groups_) {
        auto& t = g.tables[static_cast<size_t>(seq)];
        for (int32_t b : t) release(g, b);
        t.clear();
    }
    lengths_[static_cast<size_t>(seq)] = 0;
}

void BlockTables::truncate(int32_t seq, int32_t pos) {
    check_seq(seq);
    int32_t len = lengths_[static_cast<size_t>(seq)];
    if (pos < 0) fail("cannot truncate sequence ", seq, " to negative position ", pos);
    if (pos >= len) return;
    if (pos == 0) return remove(seq);
    for (auto& g : groups_) {
        if (g.spec.window <= 0) continue;
        const auto& t = g.tables[static_cast<size_t>(seq)];
        int64_t lo = std::max<int64_t>(0, static_cast<int64_t>(pos) - g.spec.window + 1);
        for (int64_t b = lo / opts_.block_size; b <= (pos - 1) / opts_.block_size; ++b)
            if (t[static_cast<size_t>(b)] < 0)
                fail("cannot truncate sequence ", seq, " to position ", pos,
                     ": its sliding-window layers already released positions from ", lo,
                     " (keep at least ", len - g.spec.window + 1, " positions)");
    }
    int64_t keep = (static_cast<int64_t>(pos) + opts_.block_size - 1) / opts_.block_size;
    for (auto& g : groups_) {
        auto& t = g.tables[static_cast<size_t>(seq)];
        while (static_cast<int64_t>(t.size()) > keep) {
            release(g, t.back());
            t.pop_back();
        }
    }
    lengths_[static_cast<size_t>(seq)] = pos;
}

void BlockTables::fork(int32_t src, int32_t dst) {
    check_seq(src);
    check_seq(dst);
    if (src == dst) return;
    remove(dst);
    for (auto& g : groups_) {
        const auto& ts = g.tables[static_cast<size_t>(src)];
        for (int32_t b : ts)
            if (b >= 0) ++g.refs[static_cast<size_t>(b)];
        g.tables[static_cast<size_t>(dst)] = ts;
    }
    lengths_[static_cast<size_t>(dst)] = lengths_[static_cast<size_t>(src)];
}

}  // namespace hf2q::kv
