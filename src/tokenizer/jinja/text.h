// Python str semantics on UTF-8 byte strings: code-point length and slicing, Unicode
// whitespace for strip/split, and case mapping. Case mapping covers ASCII, Latin-1,
// Greek and Cyrillic (simple one-to-one mappings); other scripts are left unchanged.
// Invalid UTF-8 bytes count as one code point each and are never altered.
#pragma once

#include "core/utf8.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hf2q::jinja {

// Decodes one code point at s[pos]; sets `len` to the bytes used (1 for invalid bytes,
// which decode as 0xFFFFFFFF so they match no character class).
uint32_t utf8_decode(std::string_view s, size_t pos, size_t& len);
using hf2q::utf8_append;  // core/utf8.h
// Byte offsets of every code point, plus s.size() at the end.
std::vector<size_t> utf8_offsets(std::string_view s);
size_t utf8_length(std::string_view s);

bool py_isspace(uint32_t cp);
// str.strip/lstrip/rstrip; `chars` = nullopt strips whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_title(std::string_view s);
std::string py_capitalize(std::string_view s);
// str.split(sep, maxsplit); sep = nullopt splits on whitespace runs. maxsplit < 0: all.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit);
// str.replace(old, new, count); count < 0: all.
std::string py_replace(std::string_view s, std::string_view from, std::string_view to,
                       int64_t count);
std::string html_escape(std::string_view s);

}  // namespace hf2q::jinja
