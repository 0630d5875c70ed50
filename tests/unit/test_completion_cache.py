"""Completion cache: exact hits, typing through the ghost text, backspace inside it, TTL, keys."""
from __future__ import annotations

from completion.cache import CompletionCache

S = ("auto", 64)   # settings key


def test_exact_hit_and_settings_and_suffix_in_key():
    c = CompletionCache()
    c.put("a.py", "def f(x):\n    ret", "\n", S, "urn x")
    assert c.get("a.py", "def f(x):\n    ret", "\n", S).text == "urn x"
    assert c.get("a.py", "def f(x):\n    ret", "\n", ("auto", 32)) is None
    assert c.get("a.py", "def f(x):\n    ret", "\nmore", S) is None
    assert c.get("b.py", "def f(x):\n    ret", "\n", S) is None


def test_typing_through_and_backspace():
    c = CompletionCache()
    prefix = "x = compute("
    c.put("a.py", prefix, ")\n", S, "alpha, beta)", replace_chars=1)
    hit = c.get("a.py", prefix + "al", ")\n", S)                 # typed 'al'
    assert (hit.text, hit.replace_chars, hit.typed_through) == ("pha, beta)", 1, 2)
    hit = c.get("a.py", prefix + "alpha, ", ")\n", S)
    assert hit.text == "beta)"
    hit = c.get("a.py", prefix + "a", ")\n", S)                  # backspaced back to 'a'
    assert hit.text == "lpha, beta)"
    assert c.get("a.py", prefix + "ax", ")\n", S) is None        # typed something else
    assert c.get("a.py", prefix + "alpha, beta)", ")\n", S) is None   # typed it all: nothing left


def test_typing_through_across_lines():
    c = CompletionCache()
    c.put("a.py", "def f(x):", "\n", S, "\n    y = x\n    return y")
    assert c.get("a.py", "def f(x):\n    y = x\n    ", "\n", S).text == "return y"


def test_ttl_expiry():
    now = [0.0]
    c = CompletionCache(ttl_s=10, timer=lambda: now[0])
    c.put("a.py", "p", "s", S, "text")
    now[0] = 5
    assert c.get("a.py", "p", "s", S) is not None
    assert c.get("a.py", "pt", "s", S).text == "ext"
    now[0] = 11
    assert c.get("a.py", "p", "s", S) is None
    assert c.get("a.py", "pt", "s", S) is None


def test_lru_bound_and_forget():
    c = CompletionCache(maxsize=3)
    for i in range(5):
        c.put("a.py", f"p{i}", "s", S, f"t{i}")
    assert len(c) == 3 and c.get("a.py", "p0", "s", S) is None and c.get("a.py", "p4", "s", S)
    c.forget("a.py")
    assert len(c) == 0
