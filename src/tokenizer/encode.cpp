// Encoding for tokenizer.ggml.model = "gemma4" (llama.cpp BPE, pre-tokenizer GEMMA4).
//
//   text --special-token partition--> fragments (raw text | token id)
//   raw fragment --' ' -> U+2581, invalid UTF-8 -> U+FFFD--> clean UTF-8
//   clean UTF-8 --split [^\n]+ | [\n]+--> words
//   word --BPE by merge rank (leftmost on ties)--> symbols --> token or <0xHH> per byte
#include <algorithm>
#include <cstdint>

#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/tokenizer_impl.h"

namespace hf2q::tokenizer {
namespace {

struct Fragment {
    TokenId token;  // kNoToken for raw text
    size_t off, len;
};

// Splits `text` at special tokens, exactly as llama.cpp's tokenizer_st_partition: each
// special token in turn (longest first) claims its leftmost non-overlapping occurrences
// inside the fragments that are still raw text.
void partition(const Tokenizer::Impl& im, std::string_view text, bool parse_special,
               std::vector<Fragment>& frags) {
    frags.clear();
    if (text.empty()) return;
    frags.push_back({kNoToken, 0, text.size()});
    std::vector<Fragment> next;
    for (TokenId id : im.special_tokens) {
        if (!parse_special && (im.attr[id] & (kAttrControl | kAttrUnknown))) continue;
        const std::string& tok = im.vocab.tokens[id];
        if (text.find(tok) == std::string_view::npos) continue;
        next.clear();
        for (const Fragment& f : frags) {
            if (f.token != kNoToken) {
                next.push_back(f);
                continue;
            }
            size_t pos = f.off;
            const size_t end = f.off + f.len;
            while (pos < end) {
                size_t m = text.substr(0, end).find(tok, pos);
                if (m == std::string_view::npos) break;
                if (m > pos) next.push_back({kNoToken, pos, m - pos});
                next.push_back({id, m, tok.size()});
                pos = m + tok.size();
            }
            if (pos < end) next.push_back({kNoToken, pos, end - pos});
        }
        frags.swap(next);
    }
}


// Decodes one code point at s[i] with llama.cpp's lenient rules (lead byte decides the
// length; only the continuation-byte pattern is checked, so overlong forms and
// surrogates pass). Returns false for an invalid sequence.
bool decode_cp(std::string_view s, size_t& i, uint32_t& cp) {
    auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
    auto cont = [&](size_t k) { return k < s.size() && (b(k) & 0xC0) == 0x80; };
    const uint8_t c = b(i);
    if (c < 0x80) {
        cp = c;
        i += 1;
    } else if ((c & 0x40) == 0) {
        return false;
    } else if ((c & 0x20) == 0) {
        if (!cont(i + 1)) return false;
        cp = ((c & 0x1Fu) << 6) | (b(i + 1) & 0x3Fu);
        i += 2;
    } else if ((c & 0x10) == 0) {
        if (!cont(i + 1) || !cont(i + 2)) return false;
        cp = ((c & 0x0Fu) << 12) | ((b(i + 1) & 0x3Fu) << 6) | (b(i + 2) & 0x3Fu);
        i += 3;
    } else if ((c & 0x08) == 0) {
        if (!cont(i + 1) || !cont(i + 2) || !cont(i + 3)) return false;
        cp = ((c & 0x07u) << 18) | ((b(i + 1) & 0x3Fu) << 12) | ((b(i + 2) & 0x3Fu) << 6) |
             (b(i + 3) & 0x3Fu);
        i += 4;
    } else {
        return false;
    }
    return true;
}

// Escapes spaces to U+2581 and re-encodes the code points of `raw` into `out`, turning
// each invalid byte into U+FFFD (and code points above U+10FFFF, which UTF-8 cannot
// carry, into U+FFFD as well).
void clean_text(std::string_view raw, std::string& out) {
    out.clear();
    out.reserve(raw.size() + raw.size() / 2);
    size_t i = 0;
    while (i < raw.size()) {
        const uint8_t c = static_cast<uint8_t>(raw[i]);
        if (c < 0x80) {
            if (c == ' ') {
                out += "\xE2\x96\x81";
            } else {
                out += static_cast<char>(c);
            }
            ++i;
            continue;
        }
        uint32_t cp = 0;
        if (!decode_cp(raw, i, cp)) {
            cp = 0xFFFD;
            ++i;
        }
        utf8_append(out, cp > 0x10FFFF ? 0xFFFDu : cp);
    }
}

size_t utf8_len(uint8_t lead) {
    static constexpr uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[lead >> 4];
}

struct Symbol {
    uint32_t off, len;  // bytes in the word
    int32_t id;         // symbol id, -1 when the text is in no token or merge
    int32_t prev, next;
};

struct Bigram {
    int32_t rank, left, right;
    int32_t result;  // symbol id of the merged text
    uint32_t len;    // left.len + right.len when queued; a mismatch means it is stale
};

struct BigramOrder {
    bool operator()(const Bigram& a, const Bigram& b) const {
        return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    }
};

// Per-call scratch buffers, reused across the words of one encode() call.
struct Workspace {
    std::vector<Fragment> frags;
    std::string clean;
    std::vector<Symbol> symbols;
    std::vector<Bigram> heap;
};

class WordEncoder {
  public:
    WordEncoder(const Tokenizer::Impl& im, Workspace& ws, std::vector<TokenId>& out)
        : im_(im), ws_(ws), out_(out) {}

    void encode(std::string_view word) {
        if (word.find_first_not_of('\n') == std::string_view::npos) {
            // A run of newlines that is itself a token stays whole (llama.cpp's Gemma 4 fix).
            int32_t id = im_.find_symbol(word);
            if (id >= 0 && id < im_.n_tokens()) {
                out_.push_back(id);
                return;
            }
        }
        split_symbols(word);
        merge();
        emit(word);
    }

  private:
    void split_symbols(std::string_view word) {
        auto& syms = ws_.symbols;
        syms.clear();
        for (size_t off = 0; off < word.size();) {
            const uint8_t c = static_cast<uint8_t>(word[off]);
            size_t len = std::min(word.size() - off, utf8_len(c));
            int32_t id = c < 0x80 ? im_.ascii_symbol[c] : im_.find_symbol(word.substr(off, len));
            int32_t idx = static_cast<int32_t>(syms.size());
            syms.push_back(
                {static_cast<uint32_t>(off), static_cast<uint32_t>(len), id, idx - 1, idx + 1});
            off += len;
        }
        if (!syms.empty()) syms.back().next = -1;
    }

    // Queues the pair (left, right) if it has a merge; `heapify` = false only while the
    // initial pairs are collected (one make_heap afterwards is O(n)).
    void try_add(int32_t left, int32_t right, bool heapify = true) {
        if (left < 0 || right < 0) return;
        const Symbol& l = ws_.symbols[left];
        const Symbol& r = ws_.symbols[right];
        if (l.id < 0 || r.id < 0) return;
        const Merge* m = im_.merges.find(MergeTable::key(l.id, r.id));
        if (!m) return;
        ws_.heap.push_back({m->rank, left, right, m->result, l.len + r.len});
        if (heapify) std::push_heap(ws_.heap.begin(), ws_.heap.end(), BigramOrder{});
    }

    void merge() {
        auto& syms = ws_.symbols;
        auto& heap = ws_.heap;
        heap.clear();
        for (int32_t i = 1; i < static_cast<int32_t>(syms.size()); ++i) try_add(i - 1, i, false);
        std::make_heap(heap.begin(), heap.end(), BigramOrder{});
        while (!heap.empty()) {
            std::pop_heap(heap.begin(), heap.end(), BigramOrder{});
            const Bigram bg = heap.back();
            heap.pop_back();
            Symbol& l = syms[bg.left];
            Symbol& r = syms[bg.right];
            if (l.len == 0 || r.len == 0 || l.len + r.len != bg.len) continue;  // stale
            l.id = bg.result;
            l.len += r.len;
            r.len = 0;
            l.next = r.next;
            if (r.next >= 0) syms[r.next].prev = bg.left;
            try_add(l.prev, bg.left);
            try_add(bg.left, l.next);
        }
    }

    void emit(std::string_view word) {
        const auto& syms = ws_.symbols;
        for (int32_t i = syms.empty() ? -1 : 0; i >= 0; i = syms[i].next) {
            const Symbol& s = syms[i];
            if (s.id >= 0 && s.id < im_.n_tokens()) {
                out_.push_back(s.id);
                continue;
            }
            for (uint32_t k = 0; k < s.len; ++k) {  // byte fallback; bytes without a token drop
                TokenId b = im_.byte_token[static_cast<uint8_t>(word[s.off + k])];
                if (b != kNoToken) out_.push_back(b);
            }
        }
    }

    const Tokenizer::Impl& im_;
    Workspace& ws_;
    std::vector<TokenId>& out_;
};

void encode_raw(const Tokenizer::Impl& im, std::string_view raw, Workspace& ws,
                std::vector<TokenId>& out) {
    clean_text(raw, ws.clean);
    std::string_view s = ws.clean;
    // Symbols index bytes and each other with 32-bit fields.
    if (s.size() >= static_cast<size_t>(INT32_MAX)) {
        fail("tokenizer: text of ", raw.size(), " bytes is too long to tokenize (limit 2 GiB)");
    }
    WordEncoder enc(im, ws, out);
    size_t i = 0;
    while (i < s.size()) {
        const bool nl = s[i] == '\n';
        size_t j = nl ? s.find_first_not_of('\n', i) : s.find('\n', i);
        if (j == std::string_view::npos) j = s.size();
        enc.encode(s.substr(i, j - i));
        i = j;
    }
}

}  // namespace

void encode_impl(const Tokenizer::Impl& im, std::string_view text, bool parse_special,
                 std::vector<TokenId>& out) {
    Workspace ws;
    partition(im, text, parse_special, ws.frags);
    for (const Fragment& f : ws.frags) {
        if (f.token != kNoToken) {
            out.push_back(f.token);
        } else {
            encode_raw(im, text.substr(f.off, f.len), ws, out);
        }
    }
}

}  // namespace hf2q::tokenizer
