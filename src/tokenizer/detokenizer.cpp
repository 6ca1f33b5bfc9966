// Streaming detokenizer: holds back the bytes of an incomplete UTF-8 character (a
// character split over several <0xHH> byte-fallback tokens) until it is complete.
#include <cstdint>

#include "tokenizer/tokenizer.h"

namespace hf2q::tokenizer {

size_t utf8_complete_prefix(std::string_view s) {
    // Find the last lead byte within the final 4 bytes; everything after it must be
    // continuation bytes for the sequence to be "incomplete so far".
    const size_t n = s.size();
    for (size_t back = 1; back <= 4 && back <= n; ++back) {
        const uint8_t c = static_cast<uint8_t>(s[n - back]);
        if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
        size_t need = 0;
        if ((c & 0xE0) == 0xC0) {
            need = 2;
        } else if ((c & 0xF0) == 0xE0) {
            need = 3;
        } else if ((c & 0xF8) == 0xF0) {
            need = 4;
        }
        // ASCII or an invalid lead byte is complete as it is; a valid lead followed by
        // fewer continuation bytes than it needs is held back.
        return (need != 0 && back < need) ? n - back : n;
    }
    return n;  // only continuation bytes at the end: stray bytes, pass them through
}

Detokenizer::Detokenizer(const Tokenizer& tok, bool show_special)
    : tok_(tok), show_special_(show_special) {}

std::string Detokenizer::push(TokenId id) {
    pending_ += tok_.token_to_piece(id, show_special_);
    const size_t k = utf8_complete_prefix(pending_);
    std::string out = pending_.substr(0, k);
    pending_.erase(0, k);
    return out;
}

std::string Detokenizer::flush() {
    std::string out;
    out.swap(pending_);
    return out;
}

}  // namespace hf2q::tokenizer
