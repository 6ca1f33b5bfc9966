#!/usr/bin/env python3
"""Regenerates reference_cases.json: small templates rendered by Python jinja2 configured
as transformers' apply_chat_template does (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, loopcontrols, tojson with ensure_ascii=False). Development aid only:
test_jinja reads the JSON, nothing runs Python at build or test time.

    python3 tests/jinja/gen_reference_cases.py   # needs jinja2 (tested with 3.1.6)
"""
import json
import os

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


ENV = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
ENV.filters["tojson"] = tojson
ENV.globals["raise_exception"] = raise_exception

CASES = []


def case(name, template, context=None):
    CASES.append({"name": name, "template": template, "context": context or {}})


# ---- whitespace control -------------------------------------------------------------
case("ws_trim_lstrip_blocks", "a\n  {% if true %}\n  x\n  {% endif %}\nb")
case("ws_minus_both_sides", "a  {%- if true -%}  x  {%- endif -%}  b")
case("ws_plus_disables_lstrip", "  {{ 1 }}  \n  {%+ if true %}y{% endif %}\n")
case("ws_comments", "{# comment #}\nx\n   {#- c2 -#}   y\n")
case("ws_for_lines", "line1\n    {% for i in [1,2] %}\n    {{ i }}\n    {% endfor %}\nend\n")
case("ws_raw", "{% raw %}{{ not }}{% endraw %}\n{%- raw -%}  a  {%- endraw %}b")
case("ws_plus_disables_trim", "x {%- set a = 1 +%}\ny\n{{ a }}")
case("ws_crlf_normalised", "\r\nA\r\n{% if 1 %}\r\nB\r\n{% endif %}\r\n")
case("ws_variable_minus", "{{- 'a' -}}\n\n{{- 'b' }}\n  {{ 'c' }}")
case("ws_lstrip_only_at_line_start", "  {% if true %}a{% endif %}  {% if true %}b{% endif %}\n  c")
case("ws_else_blocks", "{% if true %}\n    a\n{% else %}\n    b\n{% endif %}\n")
case("ws_minus_for", "{%- for x in l -%}\n  {{ x }}\n{%- endfor -%}", {"l": [1, 2]})
case("ws_trailing_newline_dropped", "x\n")
case("ws_two_trailing_newlines", "x\n\n")
case("ws_tabs_lstrip", "a\n\t \t{% if true %}b{% endif %}\n")
case("ws_comment_lstrip_trim", "a\n    {# note #}\nb")
# ---- expressions --------------------------------------------------------------------
case("expr_int_math", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }}")
case("expr_float_repr", "{{ 1.5 + 1 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e-5 }} {{ 3.0 }} {{ 10 / 5 }} {{ 1/3 }} {{ -0.0 }} {{ 123456789012345678.0 }}")
case("expr_concat_repr", "{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ (1, 2) }} {{ (1,) }} {{ {'a': 1, 'b': [1, 'x']} }}")
case("expr_compare_in", "{{ 1 < 2 < 3 }} {{ 1 < 2 > 3 }} {{ 'a' in 'abc' }} {{ 'z' not in 'abc' }} {{ 1 in [1,2] }} {{ 'k' in {'k': 1} }}")
case("expr_logic", "{{ true and 'x' }} {{ false or 'y' }} {{ not none }} {{ 0 or '' or 'z' }} {{ 1 if false }}|{{ 'a' if 0 else 'b' }}")
case("expr_equality", "{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' == 'a' }} {{ [1,2] == [1,2] }} {{ none == none }} {{ x == y }}")
case("expr_string_escapes", "{{ \"it's\" }} {{ 'a\\nb' }} {{ 'tab\\there' }} {{ 'uni\\u00e9' }} {{ ['it\\'s', \"q\\\"\"] }}")
case("expr_slicing", "{{ s[1:] }} {{ s[:-1] }} {{ s[::-1] }} {{ s[1:4:2] }} {{ l[-1] }} {{ l[1:] }} {{ l[::-2] }} {{ l[10] }}|{{ s[0] }}", {"s": "h\u00e9llo", "l": [1, 2, 3, 4]})
case("expr_lookup", "{{ d.a.b is defined }}|{{ d.a }}|{{ d['a'] }}|{{ d.missing }}|{{ d['b']['c'] }}|{{ l.0 }}", {"d": {"a": 1, "b": {"c": 2}}, "l": [5]})
case("expr_unary_pow", "{{ -3 | abs }} {{ - 2 ** 2 }} {{ 2 ** 3 ** 2 }}")
case("expr_floor_mod_mixed", "{{ 10 // 3 }} {{ 10.0 // 3 }} {{ -10 % 3.0 }} {{ 5 % -3 }}")
case("expr_ordering", "{{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 2 >= 2.0 }}")
case("expr_undefined_concat", "{{ 'x' if u is defined and u else 'n' }} {{ (u or 'def') }} {{ u ~ 'x' }}")
case("expr_filter_binds_tighter", "{{ 'a' + n | default('u') + 'b' }} {{ x | upper == 'STRING' }}", {"x": "string"})
# ---- statements ---------------------------------------------------------------------
case("for_items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {"d": {"z": 1, "a": 2}})
case("for_loop_vars", "{% for x in l %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}/{{ loop.previtem }}/{{ loop.nextitem }}/{{ loop.cycle('a','b') }} {% endfor %}", {"l": [3, 4, 5]})
case("for_else_and_filter", "{% for x in [] %}a{% else %}empty{% endfor %} {% for x in [1,2,3,4] if x is even %}{{ x }}{{ loop.length }}{% endfor %}")
case("for_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}")
case("for_over_dict_and_string", "{% for k in d %}{{ k }}{% endfor %}|{% for c in 'h\u00e9' %}[{{ c }}]{% endfor %}", {"d": {"b": 1, "a": 2}})
case("for_nested_loop_index", "{% for m in [5,6] %}{{ range(loop.index0 + 1, 4) | list }}{% for j in [1] %}{{ loop.index0 }}{% endfor %}{% endfor %}")
case("set_unpack", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = [3, 4] %}{% set (d, e) = c %}{{ d }}{{ e }}")
case("set_scoping_in_loop", "{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}")
case("set_namespace", "{% set ns = namespace(a=1, b='x') %}{% for i in [1,2] %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}{{ ns.b }}")
case("set_block", "{% set blk %}  hello {{ 1 }} {% endset %}[{{ blk }}]{% set b2 | upper %}abc{% endset %}{{ b2 }}")
case("macro_defaults_kwargs", "{% macro m(a, b='d', c=none) %}[{{ a }}|{{ b }}|{{ c }}]{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(1, c=3) }}{{ m('x', b='y', c='z') }}")
case("macro_caller", "{% macro outer() %}<{{ caller() }}>{% endmacro %}{% call outer() %}inside{% endcall %}")
case("macro_caller_args", "{% macro li(x) %}{{ caller(x * 2) }}{% endmacro %}{% call(v) li(21) %}v={{ v }}{% endcall %}")
case("macro_recursive", "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}")
case("macro_forward_reference", "{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}B{% endmacro %}{{ a() }}")
case("filter_block", "{% filter upper %}hello {{ 'x' }}{% endfilter %}")
case("if_elif_else", "{% if a %}A{% elif b %}B{% elif c %}C{% else %}D{% endif %}", {"b": 0, "c": "y"})
# ---- tests --------------------------------------------------------------------------
case("tests_all", "{{ x is defined }} {{ x is undefined }} {{ none is none }} {{ 's' is string }} {{ {} is mapping }} {{ [] is sequence }} {{ 's' is sequence }} {{ {} is sequence }} {{ u is sequence }} {{ 1 is number }} {{ 1 is integer }} {{ 1.0 is float }} {{ true is boolean }} {{ true is true }} {{ 0 is false }} {{ 1 is eq 1 }} {{ 1 is ne 2 }} {{ 2 is in [1,2] }} {{ 3 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 }} {{ range is callable }} {{ 1 is equalto 1 }} {{ 1 is iterable }} {{ 'a' is iterable }} {{ u is iterable }} {{ true is number }} {{ true is integer }} {{ 1 is not string }} {{ 2 is divisibleby(2) }}")
# ---- filters ------------------------------------------------------------------------
case("filters_strings", "{{ '  x  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'hello world' | title }}|{{ 'hELLO' | capitalize }}|{{ 'a' | upper }}{{ 'B' | lower }}|{{ [1,2] | length }}{{ 'h\u00e9\u00e9' | length }}{{ {'a':1} | count }}")
case("filters_default", "{{ u | default('d') }}|{{ '' | default('d') }}|{{ '' | default('d', true) }}|{{ none | default('d') }}|{{ u | d('x') }}|{{ 0 | d('z', boolean=true) }}|{{ u | default }}")
case("filters_tojson", "{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ '\u00e9\"\\\\\\n\\u0001' | tojson }}|{{ [1.0, 2.5, none, true, 'x'] | tojson }}|{{ {} | tojson }}|{{ [] | tojson(indent=2) }}", {"d": {"b": [1, {"c": "\u00fc"}], "a": None, "e": {}}})
case("filters_tojson_unicode", "{{ s | tojson }}", {"s": "\u00dc \u4f60 \U0001f999 \u2028 \x7f \x1f"})
case("filters_tojson_messages", "{{ messages | tojson }}", {"messages": [{"role": "user", "content": "hi", "n": 3, "f": 0.5, "b": False}]})
case("filters_items_dictsort", "{{ d | items | list }}|{{ d | dictsort }}|{{ d | dictsort(reverse=true) }}|{{ d | dictsort(by='value') }}|{{ d2 | dictsort }}|{{ d2 | dictsort(true) }}", {"d": {"b": 2, "a": 3, "c": 1}, "d2": {"B": 1, "a": 2, "C": 3}})
case("filters_map_select", "{{ l | map('upper') | list }}|{{ objs | map(attribute='n') | join(',') }}|{{ objs | map(attribute='m', default='?') | list }}|{{ [1,2,3,4] | select('even') | list }}|{{ [1,2,3] | reject('odd') | list }}|{{ objs | selectattr('n', 'eq', 'b') | list }}|{{ objs | rejectattr('n') | list }}|{{ [0, 1, '', 'a'] | select | list }}", {"l": ["a", "b"], "objs": [{"n": "a"}, {"n": "b"}, {"n": ""}]})
case("filters_sequences", "{{ [1,2,3] | join }}|{{ [1,2,3] | join('-') }}|{{ [1,2] | first }}|{{ [1,2] | last }}|{{ 'abc' | first }}|{{ 'abc' | list }}|{{ 12 | string }}|{{ '42' | int + 1 }}|{{ '3.7' | int }}|{{ 'x' | int }}|{{ 3.9 | int }}|{{ '2.5' | float }}|{{ 3 | float }}|{{ 'q' | float }}")
case("filters_numbers_replace", "{{ -3.5 | abs }}|{{ 2.5 | round }}|{{ 3.5 | round }}|{{ 2.675 | round(2) }}|{{ 3.14159 | round(2, 'floor') }}|{{ 3.14159 | round(1, 'ceil') }}|{{ 7 | round }}|{{ 'aXbX' | replace('X', 'y') }}|{{ 'aaa' | replace('a', 'b', 2) }}")
case("filters_sort_unique", "{{ ['a', 'B', 'A', 'b', 'c'] | unique | list }}|{{ [3, 1, 2] | sort }}|{{ ['b', 'A', 'c'] | sort }}|{{ ['b', 'A', 'c'] | sort(case_sensitive=true) }}|{{ [3,1,2] | sort(reverse=true) }}|{{ objs | sort(attribute='n') | map(attribute='n') | join }}|{{ [1,2,3] | reverse | list }}|{{ 'abc' | reverse }}|{{ '<a&b>' | escape }}|{{ '<x>' | safe }}|{{ [3,1,2] | min }}{{ [3,1,2] | max }}{{ [1,2,3] | sum }}", {"objs": [{"n": "b"}, {"n": "a"}]})
case("filters_unicode_whitespace", "{{ s | trim }}|{{ s.strip() }}|{{ s | upper }}|{{ s | length }}", {"s": "\u00a0\u3000 \u00fcber \u4f60\u597d \u2003"})
# ---- methods ------------------------------------------------------------------------
case("methods_str", "{{ ' a b '.strip() }}|{{ 'xax'.strip('x') }}|{{ ' a'.lstrip() }}|{{ 'a '.rstrip() }}|{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith('bc') }}|{{ 'abc'.startswith(('x', 'a')) }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'aXb'.replace('X', '-') }}|{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}|{{ 'hi there'.title() }}|{{ '-'.join(['a', 'b']) }}|{{ 'abcb'.find('b') }}|{{ 'abcb'.count('b') }}")
case("methods_dict", "{{ d.get('a') }}|{{ d.get('z') }}|{{ d.get('z', 5) }}|{{ d.keys() | list }}|{{ d.values() | list }}|{{ d.items() | list }}", {"d": {"a": 1, "b": 2}})
case("globals", "{{ range(3) | list | tojson }} {{ range(1, 10, 3) | list }} {{ range(5, 0, -2) | list }} {{ dict(a=1, b='x') | tojson }} {{ [1, 2, 3][1:] | tojson }}")
case("numbers_print", "{{ x }}|{{ y }}|{{ z }}|{{ w }}", {"x": 1.0, "y": 1e100, "z": 12345.678, "w": 0.000123})


def main():
    out = []
    for c in CASES:
        c = dict(c)
        c["expected"] = ENV.from_string(c["template"]).render(**c["context"])
        out.append(c)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference_cases.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(out)} cases to {path}")


if __name__ == "__main__":
    main()
