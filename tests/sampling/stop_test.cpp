// Tests for runtime/stop: stop strings over streamed pieces and finish reasons.
#include "runtime/stop.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"

namespace hf2q::runtime {
namespace {

struct StreamResult {
    std::string emitted;
    bool stopped;
    std::string matched;
};

StreamResult stream(const std::vector<std::string>& stops, const std::vector<std::string>& pieces) {
    StopMatcher m(stops);
    StreamResult r;
    for (const auto& p : pieces) {
        const std::string out = m.feed(p);
        // What is emitted must never end inside a UTF-8 sequence.
        EXPECT_EQ(utf8_incomplete_suffix(out), 0u) << "piece '" << p << "'";
        r.emitted += out;
    }
    r.emitted += m.flush();
    r.stopped = m.stopped();
    r.matched = std::string(m.matched());
    return r;
}

// Expected result computed on the whole text at once.
StreamResult one_shot(const std::vector<std::string>& stops, const std::string& text) {
    // The first stop string to be completed: smallest end, then smallest start.
    size_t best = std::string::npos, best_end = std::string::npos;
    std::string matched;
    for (const auto& s : stops) {
        const size_t pos = text.find(s);
        if (pos == std::string::npos) continue;
        if (pos + s.size() < best_end || (pos + s.size() == best_end && pos < best)) {
            best = pos, best_end = pos + s.size(), matched = s;
        }
    }
    if (best == std::string::npos) return {text, false, ""};
    return {text.substr(0, best), true, matched};
}

// Every split of `text` into two and three pieces gives the one-shot result.
void check_all_splits(const std::vector<std::string>& stops, const std::string& text) {
    const StreamResult want = one_shot(stops, text);
    for (size_t i = 0; i <= text.size(); ++i) {
        for (size_t j = i; j <= text.size(); ++j) {
            const StreamResult got =
                stream(stops, {text.substr(0, i), text.substr(i, j - i), text.substr(j)});
            ASSERT_EQ(got.emitted, want.emitted)
                << "split at " << i << "," << j << " of '" << text << "'";
            ASSERT_EQ(got.stopped, want.stopped);
            ASSERT_EQ(got.matched, want.matched);
        }
    }
    std::vector<std::string> bytes;
    for (char c : text) bytes.emplace_back(1, c);
    EXPECT_EQ(stream(stops, bytes).emitted, want.emitted);
}

TEST(StopMatcher, StopSplitAcrossPieces) {
    const auto r = stream({"<end>"}, {"Hello wor", "ld<e", "n", "d>ignored"});
    EXPECT_EQ(r.emitted, "Hello world");
    EXPECT_TRUE(r.stopped);
    EXPECT_EQ(r.matched, "<end>");
}

TEST(StopMatcher, HoldsBackOnlyPossiblePrefix) {
    StopMatcher m({"STOP"});
    EXPECT_EQ(m.feed("abc S"), "abc ");
    EXPECT_EQ(m.feed("T"), "");
    EXPECT_EQ(m.feed("x"), "STx");  // was not a stop after all
    EXPECT_EQ(m.feed("ST"), "");
    EXPECT_EQ(m.flush(), "ST");
    EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, OverlappingPrefixes) {
    check_all_splits({"abcd"}, "xxabcabcabcdyy");
    check_all_splits({"aab"}, "aaaab");
    check_all_splits({"abab"}, "abaababab!");
    const auto r = stream({"aab"}, {"a", "a", "a", "a", "b"});
    EXPECT_EQ(r.emitted, "aa");
}

TEST(StopMatcher, MultipleStopsFirstCompletedWins) {
    check_all_splits({"world", "lo w", "o"}, "hello world");
    check_all_splits({"world", "lo w"}, "hello world");
    const auto r = stream({"world", "lo w"}, {"hel", "lo world"});
    EXPECT_EQ(r.emitted, "hel");
    EXPECT_EQ(r.matched, "lo w");
    // "o" is complete (byte 5) before "lo w" (byte 7) although it starts later.
    const auto first = stream({"lo w", "o"}, {"hello world"});
    EXPECT_EQ(first.emitted, "hell");
    EXPECT_EQ(first.matched, "o");
    // Same end: the longer (earlier-starting) stop is reported.
    const auto tie = stream({"bc", "abc"}, {"xabc"});
    EXPECT_EQ(tie.emitted, "x");
    EXPECT_EQ(tie.matched, "abc");
    check_all_splits({"\n\n", "User:"}, "line1\nline2\n\nUser: hi");
}

TEST(StopMatcher, Utf8MultibyteStopsAndPieces) {
    // "né" + "…" split inside multi-byte sequences; stop "世界" (3 bytes per char).
    const std::string text = "n\xC3\xA9 \xE2\x80\xA6 \xE4\xB8\x96\xE7\x95\x8C! \xF0\x9F\xA6\x99";
    check_all_splits({"\xE4\xB8\x96\xE7\x95\x8C"}, text);
    check_all_splits({"zzz"}, text);
    StopMatcher m;
    EXPECT_EQ(m.feed("a\xF0\x9F"), "a");
    EXPECT_EQ(m.feed("\xA6"), "");
    EXPECT_EQ(m.feed("\x99z"), "\xF0\x9F\xA6\x99z");
}

TEST(StopMatcher, NoStopsPassesThrough) {
    const auto r = stream({}, {"plain ", "text <end>"});
    EXPECT_EQ(r.emitted, "plain text <end>");
    EXPECT_FALSE(r.stopped);
}

TEST(StopMatcher, FeedAfterStopReturnsNothing) {
    StopMatcher m({"."});
    EXPECT_EQ(m.feed("One. Two."), "One");
    EXPECT_TRUE(m.stopped());
    EXPECT_EQ(m.feed("more"), "");
    EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, EmptyStopIsRejected) {
    EXPECT_THROW(StopMatcher({"ok", ""}), Error);
}

TEST(StopHelpers, PartialMatchSuffix) {
    const std::vector<std::string> pats = {"<end>", "<|tool"};
    EXPECT_EQ(partial_match_suffix("abc<|to", pats), 4u);
    EXPECT_EQ(partial_match_suffix("abc<", pats), 1u);
    EXPECT_EQ(partial_match_suffix("abc<end>", pats), 0u);  // a whole match is not a partial one
    EXPECT_EQ(partial_match_suffix("", pats), 0u);
}

TEST(StopHelpers, Utf8IncompleteSuffix) {
    EXPECT_EQ(utf8_incomplete_suffix("abc"), 0u);
    EXPECT_EQ(utf8_incomplete_suffix("a\xC3"), 1u);
    EXPECT_EQ(utf8_incomplete_suffix("a\xC3\xA9"), 0u);
    EXPECT_EQ(utf8_incomplete_suffix("\xE4\xB8"), 2u);
    EXPECT_EQ(utf8_incomplete_suffix("\xF0\x9F\xA6"), 3u);
    EXPECT_EQ(utf8_incomplete_suffix("\xF0\x9F\xA6\x99"), 0u);
    EXPECT_EQ(utf8_incomplete_suffix("\x80\x80"), 0u);  // stray continuation bytes
}

TEST(FinishReason, OrderAndNames) {
    EXPECT_EQ(finish_reason_after_token(false, false, 3, 10), std::nullopt);
    EXPECT_EQ(finish_reason_after_token(false, false, 10, 10), FinishReason::length);
    EXPECT_EQ(finish_reason_after_token(false, true, 10, 10), FinishReason::stop);
    EXPECT_EQ(finish_reason_after_token(true, true, 10, 10), FinishReason::eog);
    EXPECT_EQ(finish_reason_after_token(false, false, 1000000, -1), std::nullopt);
    EXPECT_STREQ(finish_reason_name(FinishReason::stop), "stop");
    EXPECT_STREQ(finish_reason_name(FinishReason::length), "length");
    EXPECT_STREQ(finish_reason_name(FinishReason::eog), "eog");
}

}  // namespace
}  // namespace hf2q::runtime
