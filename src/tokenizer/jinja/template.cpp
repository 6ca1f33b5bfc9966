#include "tokenizer/jinja/template.h"

#include "core/error.h"
#include "tokenizer/jinja/interp.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/parser.h"

namespace hf2q::jinja {
namespace {

// jinja2 rejects unknown filters and tests when compiling, even in branches that
// never run; so do we.
void check_names(const Node& n, const std::string& name) {
    if (n.type == NodeType::Filter && !has_filter(n.s))
        fail(name, ":", n.line, ":", n.col, ": no filter named '", n.s, "'");
    if (n.type == NodeType::Test && !has_test(n.s))
        fail(name, ":", n.line, ":", n.col, ": no test named '", n.s, "'");
    for (const auto& c : n.args)
        if (c) check_names(*c, name);
    for (const auto& [k, c] : n.kwargs)
        if (c) check_names(*c, name);
    for (const auto& c : n.body) check_names(*c, name);
    for (const auto& c : n.orelse) check_names(*c, name);
}

template <class Json>
std::string render_json(const std::vector<NodePtr>& body, const std::string& name,
                        const Json& context, const RenderLimits& limits) {
    if (!context.is_object()) fail(name, ": template context must be a JSON object");
    auto root = std::make_shared<Frame>();
    for (auto it = context.begin(); it != context.end(); ++it)
        root->set(it.key(), from_json(it.value()));
    Interpreter in(name, limits);
    return in.render(body, root);
}

}  // namespace

Template Template::parse(const std::string& source, std::string name) {
    Template t;
    t.name_ = std::move(name);
    auto tokens = tokenize(source, t.name_);
    t.body_ = parse_template(tokens, t.name_);
    for (const auto& n : t.body_) check_names(*n, t.name_);
    return t;
}

Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;
Template::~Template() = default;

std::string Template::render(const nlohmann::ordered_json& context,
                             const RenderLimits& limits) const {
    return render_json(body_, name_, context, limits);
}

std::string Template::render(const nlohmann::json& context, const RenderLimits& limits) const {
    return render_json(body_, name_, context, limits);
}

}  // namespace hf2q::jinja
