// hf2q::Error and message helpers, shared by every layer and the public API.
//
// hf2q reports bad input (files, flags, requests) by throwing hf2q::Error with a
// message that names what is wrong and, where it applies, where (field, byte
// offset, tensor name). Frontends catch it and print it; nothing below them exits.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace hf2q {

class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Concatenates any streamable values into one string.
template <class... Args>
std::string str_cat(Args&&... args) {
    std::ostringstream os;
    (os << ... << std::forward<Args>(args));
    return os.str();
}

template <class... Args>
[[noreturn]] void fail(Args&&... args) {
    throw Error(str_cat(std::forward<Args>(args)...));
}

// Internal invariant check: a failure is a bug in hf2q, not bad input.
#define HF2Q_ASSERT(cond)                                                              \
    do {                                                                               \
        if (!(cond)) ::hf2q::fail("internal error: ", #cond, " (", __FILE__, ":", __LINE__, ")"); \
    } while (0)

}  // namespace hf2q
