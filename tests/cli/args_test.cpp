// ArgParser (tools/hf2q/args.h): values are checked as they are parsed, and every bad
// command line ends in hf2q::Error with a message that names the option and the value.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "every_option.h"

namespace hf2q::cli {
namespace {

// Parses args; returns the error message, or "" when parsing succeeded.
std::string parse(EveryOption& o, const std::vector<std::string>& args) {
    ArgParser p = o.parser();
    try {
        p.parse(args);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(ArgParser, ParsesEveryKind) {
    EveryOption o;
    EXPECT_EQ(parse(o, {"-m", "a.gguf", "--name=y", "-n", "-3", "--big", "-9000000000", "--count",
                        "18446744073709551615", "--temp", "0.25", "--scale", "1e300", "--json", "--stop", "a",
                        "--stop", "b", "pos"}),
              "");
    EXPECT_EQ(o.model, "a.gguf");
    EXPECT_EQ(o.name, "y");
    EXPECT_EQ(o.n, -3);
    EXPECT_EQ(o.big, -9000000000LL);
    EXPECT_EQ(o.count, 18446744073709551615ULL);
    EXPECT_FLOAT_EQ(o.temp, 0.25f);
    EXPECT_DOUBLE_EQ(o.scale, 1e300);
    EXPECT_TRUE(o.json);
    EXPECT_EQ(o.stops, (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(o.file, "pos");
}

TEST(ArgParser, RejectsBadValuesWithTheOptionAndValue) {
    struct Case {
        std::vector<std::string> args;
        std::string expect;  // a part of the message
    };
    const std::vector<Case> cases = {
        {{"-m", "a", "-n", "2147483648"}, "-n expects an integer, got '2147483648'"},
        {{"-m", "a", "-n", "12abc"}, "-n expects an integer, got '12abc'"},
        {{"-m", "a", "-n", ""}, "-n expects an integer, got an empty value"},
        {{"-m", "a", "--count", "-1"}, "--count expects a non-negative integer, got '-1'"},
        {{"-m", "a", "--count", "18446744073709551616"}, "--count expects a non-negative integer"},
        {{"-m", "a", "--temp", "nan"}, "--temp expects a number, got 'nan'"},
        {{"-m", "a", "--temp", "-inf"}, "--temp expects a number, got '-inf'"},
        {{"-m", "a", "--temp", "1e39"}, "--temp expects a number of magnitude at most"},
        {{"-m", "a", "--temp", "-1e39"}, "got '-1e39'"},
        {{"-m", "a", "--scale", "1e400"}, "--scale expects a number, got '1e400'"},
        {{"-m", "a", "--temp", "0.5x"}, "--temp expects a number, got '0.5x'"},
        {{"-m", "a", "--json=1"}, "option --json takes no value"},
        {{"-m", "a", "--temp"}, "option --temp needs a value (T)"},
        {{"-m", "a", "--nope"}, "unknown option '--nope' (see 'hf2q test --help')"},
        {{"-m", "a", "one", "two"}, "unexpected argument 'two'"},
        {{"--json"}, "missing required option --model"},
    };
    for (const Case& c : cases) {
        EveryOption o;
        const std::string msg = parse(o, c.args);
        EXPECT_NE(msg.find(c.expect), std::string::npos) << "got: " << msg;
    }
}

// Negative numbers are values, not options; the last of a repeated option wins.
TEST(ArgParser, NegativeNumbersAndRepeats) {
    EveryOption o;
    EXPECT_EQ(parse(o, {"-m", "a", "--temp", "-.5", "-n", "1", "-n", "7"}), "");
    EXPECT_FLOAT_EQ(o.temp, -0.5f);
    EXPECT_EQ(o.n, 7);
}

TEST(ArgParser, IntegerLists) {
    EXPECT_EQ(parse_int_list("1, 8,64", "--batch"), (std::vector<int64_t>{1, 8, 64}));
    EXPECT_TRUE(parse_int_list("", "--batch").empty());
    EXPECT_THROW(parse_int_list("1,,2", "--batch"), Error);
    EXPECT_THROW(parse_int_list("1,x", "--batch"), Error);
    EXPECT_THROW(parse_int_list("99999999999999999999", "--batch"), Error);
}

}  // namespace
}  // namespace hf2q::cli
