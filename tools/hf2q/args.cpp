#include "args.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "core/error.h"

namespace hf2q::cli {
namespace {

std::vector<std::string> split_names(const std::string& names) { return split_list(names, ','); }

template <class T>
T parse_integer(const std::string& flag, const std::string& v) {
    errno = 0;
    char* end = nullptr;
    if (v.empty()) fail("option ", flag, " expects an integer, got an empty value");
    if constexpr (std::is_signed_v<T>) {
        long long x = std::strtoll(v.c_str(), &end, 10);
        if (errno || *end || x < std::numeric_limits<T>::min() || x > std::numeric_limits<T>::max())
            fail("option ", flag, " expects an integer, got '", v, "'");
        return static_cast<T>(x);
    } else {
        if (v[0] == '-') fail("option ", flag, " expects a non-negative integer, got '", v, "'");
        unsigned long long x = std::strtoull(v.c_str(), &end, 10);
        if (errno || *end || x > std::numeric_limits<T>::max())
            fail("option ", flag, " expects a non-negative integer, got '", v, "'");
        return static_cast<T>(x);
    }
}

double parse_real(const std::string& flag, const std::string& v) {
    errno = 0;
    char* end = nullptr;
    double x = std::strtod(v.c_str(), &end);
    if (v.empty() || errno || *end || !std::isfinite(x))
        fail("option ", flag, " expects a number, got '", v, "'");
    return x;
}

}  // namespace

std::vector<std::string> split_list(const std::string& s, char sep) {
    std::vector<std::string> out;
    if (s.empty()) return out;
    std::string cur;
    for (char c : s) {
        if (c == sep) {
            out.push_back(cur);
            cur.clear();
        } else {
            cur += c;
        }
    }
    out.push_back(cur);
    return out;
}

std::vector<int64_t> parse_int_list(const std::string& s, const std::string& what) {
    std::vector<int64_t> out;
    for (const auto& part : split_list(s, ',')) {
        std::string t;
        for (char c : part)
            if (c != ' ') t += c;
        out.push_back(parse_integer<int64_t>(what, t));
    }
    return out;
}

ArgParser::ArgParser(std::string command, std::string usage, std::string description)
    : command_(std::move(command)), usage_(std::move(usage)), description_(std::move(description)) {}

void ArgParser::add(const std::string& names, const std::string& metavar, const std::string& help,
                    Target t, bool required) {
    Opt o;
    o.names = split_names(names);
    o.metavar = metavar;
    o.help = help;
    o.target = t;
    o.required = required;
    std::visit(
        [&](auto* p) {
            using P = std::remove_pointer_t<decltype(p)>;
            if constexpr (std::is_same_v<P, std::string>) {
                if (!p->empty()) o.default_text = *p;
            } else if constexpr (std::is_same_v<P, std::vector<std::string>>) {
            } else if constexpr (std::is_same_v<P, bool>) {
            } else {
                std::ostringstream os;
                os << *p;
                o.default_text = os.str();
            }
        },
        t);
    opts_.push_back(std::move(o));
}

void ArgParser::flag(const std::string& names, const std::string& help, bool* out) {
    add(names, "", help, Target{out}, false);
}

void ArgParser::positional(const std::string& name, const std::string& help, std::string* out,
                           bool required) {
    pos_.push_back({name, help, out, required});
}

void ArgParser::assign(Opt& o, const std::string& name, const std::string& v) {
    std::visit(
        [&](auto* p) {
            using P = std::remove_pointer_t<decltype(p)>;
            if constexpr (std::is_same_v<P, bool>) {
                *p = true;
            } else if constexpr (std::is_same_v<P, std::string>) {
                *p = v;
            } else if constexpr (std::is_same_v<P, std::vector<std::string>>) {
                p->push_back(v);
            } else if constexpr (std::is_integral_v<P>) {
                *p = parse_integer<P>(name, v);
            } else {
                const double x = parse_real(name, v);
                // A double past the target's range would become infinite (or be undefined).
                if (std::fabs(x) > static_cast<double>(std::numeric_limits<P>::max()))
                    fail("option ", name, " expects a number of magnitude at most ", std::numeric_limits<P>::max(),
                         ", got '", v, "'");
                *p = static_cast<P>(x);
            }
        },
        o.target);
}

bool ArgParser::parse(const std::vector<std::string>& args) {
    size_t next_pos = 0;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "-h" || a == "--help") {
            std::fputs(help_text().c_str(), stdout);
            return false;
        }
        // An option: "-x" or "--xx", but not a negative number ("-3", "-.5"), which is a value.
        const bool number = a.size() > 1 && (std::isdigit(static_cast<unsigned char>(a[1])) || a[1] == '.');
        if (a.size() > 1 && a[0] == '-' && !number) {
            std::string name = a, value;
            bool has_inline = false;
            if (auto eq = a.find('='); eq != std::string::npos && a.rfind("--", 0) == 0) {
                name = a.substr(0, eq);
                value = a.substr(eq + 1);
                has_inline = true;
            }
            Opt* found = nullptr;
            for (auto& o : opts_)
                for (auto& n : o.names)
                    if (n == name) found = &o;
            if (!found) fail("unknown option '", name, "' (see 'hf2q ", command_, " --help')");
            found->seen = true;
            if (std::holds_alternative<bool*>(found->target)) {
                if (has_inline) fail("option ", name, " takes no value");
                assign(*found, name, "");
                continue;
            }
            if (!has_inline) {
                if (i + 1 >= args.size()) fail("option ", name, " needs a value (", found->metavar, ")");
                value = args[++i];
            }
            assign(*found, name, value);
            continue;
        }
        if (next_pos >= pos_.size())
            fail("unexpected argument '", a, "' (see 'hf2q ", command_, " --help')");
        *pos_[next_pos].out = a;
        pos_[next_pos].seen = true;
        ++next_pos;
    }
    for (auto& o : opts_)
        if (o.required && !o.seen)
            fail("missing required option ", o.names.back(), " (see 'hf2q ", command_, " --help')");
    for (auto& p : pos_)
        if (p.required && !p.seen)
            fail("missing argument ", p.name, " (see 'hf2q ", command_, " --help')");
    return true;
}

bool ArgParser::was_set(const std::string& long_name) const {
    for (auto& o : opts_)
        for (auto& n : o.names)
            if (n == long_name) return o.seen;
    return false;
}

std::string ArgParser::help_text() const {
    std::ostringstream os;
    os << "usage: hf2q " << command_ << " " << usage_ << "\n\n" << description_ << "\n";
    if (!pos_.empty()) {
        os << "\narguments:\n";
        for (auto& p : pos_) {
            std::string left = "  " + p.name;
            os << left << std::string(left.size() < 28 ? 28 - left.size() : 1, ' ') << p.help << "\n";
        }
    }
    os << "\noptions:\n";
    for (auto& o : opts_) {
        std::string left = "  ";
        for (size_t i = 0; i < o.names.size(); ++i) left += (i ? ", " : "") + o.names[i];
        if (!o.metavar.empty()) left += " " + o.metavar;
        std::string help = o.help;
        if (o.required) help += " (required)";
        else if (!o.default_text.empty()) help += " (default: " + o.default_text + ")";
        if (left.size() >= 28) os << left << "\n" << std::string(28, ' ') << help << "\n";
        else os << left << std::string(28 - left.size(), ' ') << help << "\n";
    }
    os << "  -h, --help                show this help\n";
    return os.str();
}

}  // namespace hf2q::cli
