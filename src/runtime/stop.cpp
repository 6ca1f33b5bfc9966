#include "runtime/stop.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace hf2q::runtime {

const char* finish_reason_name(FinishReason reason) {
    switch (reason) {
        case FinishReason::stop:
            return "stop";
        case FinishReason::length:
            return "length";
        case FinishReason::eog:
            return "eog";
    }
    return "unknown";
}

std::optional<FinishReason> finish_reason_after_token(bool token_is_eog, bool stop_matched,
                                                      int64_t n_generated, int64_t max_tokens) {
    if (token_is_eog) return FinishReason::eog;
    if (stop_matched) return FinishReason::stop;
    if (max_tokens >= 0 && n_generated >= max_tokens) return FinishReason::length;
    return std::nullopt;
}

size_t utf8_incomplete_suffix(std::string_view text) {
    size_t cont = 0;  // trailing continuation bytes 10xxxxxx
    while (cont < 3 && cont < text.size() &&
           (static_cast<unsigned char>(text[text.size() - 1 - cont]) & 0xC0) == 0x80) {
        ++cont;
    }
    if (cont == text.size()) return 0;
    const auto lead = static_cast<unsigned char>(text[text.size() - 1 - cont]);
    size_t need = 1;
    if (lead >= 0xF0 && lead < 0xF8) {
        need = 4;
    } else if (lead >= 0xE0 && lead < 0xF0) {
        need = 3;
    } else if (lead >= 0xC0 && lead < 0xE0) {
        need = 2;
    }
    return need > cont + 1 ? cont + 1 : 0;
}

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
    for (size_t i = 0; i < stops_.size(); ++i) {
        if (stops_[i].empty()) fail("stop string ", i, " is empty");
    }
}

std::string StopMatcher::feed(std::string_view piece) {
    if (stopped()) return {};
    held_.append(piece);
    // Generation stops at the first stop string to be completed, i.e. the match that
    // ends first (ties: the one starting first, then the one listed first). The held text
    // never contains a whole stop string, so every match ends inside `piece` and searching
    // held_ finds the same match as searching the whole text at once.
    size_t best_pos = std::string::npos;
    size_t best_end = std::string::npos;
    for (size_t i = 0; i < stops_.size(); ++i) {
        const size_t pos = held_.find(stops_[i]);
        if (pos == std::string::npos) continue;
        const size_t end = pos + stops_[i].size();
        if (end < best_end || (end == best_end && pos < best_pos)) {
            best_pos = pos;
            best_end = end;
            matched_ = static_cast<int>(i);
        }
    }
    if (best_pos != std::string::npos) {
        std::string out = held_.substr(0, best_pos);
        held_.clear();
        return out;
    }
    const size_t keep =
        std::max(partial_match_suffix(held_, stops_), utf8_incomplete_suffix(held_));
    std::string out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
}

std::string StopMatcher::flush() {
    return std::exchange(held_, std::string());
}

std::string_view StopMatcher::matched() const {
    return matched_ < 0 ? std::string_view()
                        : std::string_view(stops_[static_cast<size_t>(matched_)]);
}

}  // namespace hf2q::runtime
