// Stop strings and finish reasons for the generation loop.
//
// The loop feeds each detokenized piece to StopMatcher::feed() and streams what it
// returns. End-of-generation tokens are the caller's (tokenizer is_eog);
// finish_reason_after_token() combines the three ways a generation ends.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hf2q::runtime {

enum class FinishReason {
    stop,    // a stop string matched
    length,  // max_tokens reached
    eog,     // the model produced an end-of-generation token
};

// "stop", "length" or "eog". (The OpenAI API reports eog as "stop".)
const char* finish_reason_name(FinishReason reason);

// Whether generation ends after the token just produced, checked in the order
// eog, stop string, length. n_generated counts that token; max_tokens < 0 = no limit.
std::optional<FinishReason> finish_reason_after_token(bool token_is_eog, bool stop_matched,
                                                      int64_t n_generated, int64_t max_tokens);

// Length of the longest suffix of `text` that is a proper, non-empty prefix of one of
// `patterns` (a range of string-like values): the bytes a stream must hold back.
template <class Patterns>
size_t partial_match_suffix(std::string_view text, const Patterns& patterns) {
    size_t best = 0;
    for (const auto& p : patterns) {
        const std::string_view pat(p);
        const size_t max_len = std::min(text.size(), pat.empty() ? 0 : pat.size() - 1);
        for (size_t len = max_len; len > best; --len) {
            if (text.substr(text.size() - len) == pat.substr(0, len)) {
                best = len;
                break;
            }
        }
    }
    return best;
}

// Number of trailing bytes that form the start of a UTF-8 sequence whose remaining
// continuation bytes have not arrived yet (0 to 3). Invalid bytes count as complete.
size_t utf8_incomplete_suffix(std::string_view text);

// Finds stop strings in a stream of text pieces. The text returned by feed() never
// ends inside a possible stop string or inside a UTF-8 sequence; once a stop string
// matches, the text before it is returned, the stop string and everything after are
// dropped, and stopped() is true. The stop string completed first wins (the match
// ending earliest; ties: the one starting earliest, then the one listed first), so the
// result does not depend on how the text is split into pieces.
class StopMatcher {
  public:
    // Empty stop strings are invalid (hf2q::Error). No stop strings is fine.
    explicit StopMatcher(std::vector<std::string> stops = {});

    // Appends a piece; returns the text that is now safe to emit (possibly empty).
    std::string feed(std::string_view piece);

    // End of generation without a match: returns the held-back text.
    std::string flush();

    bool stopped() const { return matched_ >= 0; }
    // The stop string that matched; empty before a match.
    std::string_view matched() const;
    const std::vector<std::string>& stops() const { return stops_; }

  private:
    std::vector<std::string> stops_;
    std::string held_;  // suffix not yet emitted
    int matched_ = -1;  // index into stops_
};

}  // namespace hf2q::runtime
