"""Where a tokenizer's texts may be cut without changing their tokens: one rule per pipeline.

:func:`cut_rule` reads a ``tokenizer.json`` once and compiles the places its pipeline splits a
text into pieces that no normalizer, pre-tokenizer or model decision crosses (the proof, per
family, is the lemma in :mod:`models.text.tokens.bounded`); :meth:`CutRule.find` finds one in a window
of a text with a few regex searches over that window only. Character classes are built from
:mod:`unicodedata`, restricted to characters whose category (and normal form) Unicode 3.2
already gave them, so the Rust tables of whatever Unicode version the tokenizers library
carries agree with ours on every character a cut depends on.
"""

from __future__ import annotations

import json
import re
from typing import Any, cast

from models.text.tokens.char_classes import (
    _CJK,
    _EXTEND,
    _PREPEND,
    _WS,
    CJK,
    WHITE_SPACE,
    Form,
    _bert_classes,
    _byte_level_classes,
    _byte_of_char,
    _class,
    _solid,
)
from models.text.tokens.cut_rule import CutRule
from models.text.tokens.unigram_cuts import piece_normalizers, unigram_rule


def _normalizers(spec: dict[str, Any] | None) -> list[dict[str, Any]]:
    if spec is None:
        return []
    if spec.get("type") == "Sequence":
        return [n for s in spec.get("normalizers", []) for n in _normalizers(s)]
    return [spec]


def _whitespace_cuts(tokenizer: Any, first_space: bool) -> str:
    """The White_Space characters the tokenizer's own normalizer keeps as white space (starting
    with U+0020 when ``first_space``: Metaspace and ByteLevel's add_prefix_space look for that
    one): asked of the normalizer itself, one character at a time."""
    spaces = [chr(c) for c in (9, 10, 11, 12, 13, 32, 0x85, 0xA0, 0x1680, 0x2028, 0x2029)]
    spaces += [chr(c) for c in (*range(0x2000, 0x200B), 0x202F, 0x205F, 0x3000)]
    kept = []
    for c in spaces:
        n = c if tokenizer.normalizer is None else tokenizer.normalizer.normalize_str(c)
        if n and all(_WS.match(x) for x in n) and (n[0] == " " or not first_space):
            kept.append(ord(c))
    return _class(sorted(kept))


def _never() -> re.Pattern[str]:
    return re.compile(r"(?!)")


def cut_rule(tokenizer_json: str) -> CutRule:
    """The cut rule of a tokenizer that :func:`models.text.tokens.bounded.bounded_reason` accepts."""
    from tokenizers import Tokenizer

    spec = json.loads(tokenizer_json)
    tokenizer = Tokenizer.from_str(tokenizer_json)
    norms = _normalizers(spec.get("normalizer"))
    kinds = [str(n.get("type")) for n in norms]
    pre = spec.get("pre_tokenizer") or {}
    kind = pre.get("type")
    model = spec.get("model") or {}
    added = [t.get("content", "") for t in spec.get("added_tokens") or []]
    added_chars = {x for t in added for c in t for x in (c, c.lower(), c.upper())}
    plain_added = not any(t.get("single_word") for t in spec.get("added_tokens") or [])
    splitters = {"BertPreTokenizer", "ByteLevel", "Metaspace", "Whitespace", "WhitespaceSplit"}
    parts = pre.get("pretokenizers", []) if kind == "Sequence" else [pre]
    if not any(p.get("type") in splitters for p in parts):
        # Punctuation or Digits alone keep white space inside pieces.
        return CutRule("none (no pre-tokenizer splits at white space)", _never())
    if kind == "BertPreTokenizer" and kinds in ([], ["BertNormalizer"]):
        return _bert_rule(tokenizer, norms, model, added, added_chars, plain_added)
    if kind == "ByteLevel" and not set(kinds) - {"NFC", "NFD", "NFKC", "NFKD", "Lowercase"}:
        return _byte_level_rule(tokenizer, pre, kinds, model, added_chars, plain_added)
    # Metaspace (it splits at U+0020 only, after the normalizer), and any other pipeline: a
    # white space the normalizer turns into U+0020, after a character no normalizer we accept
    # removes or ends in white space (a letter or digit under Precompiled, whose table may map
    # anything), between two grapheme clusters (Precompiled rewrites whole clusters).
    cuts = _whitespace_cuts(tokenizer, kind not in ("Whitespace", "WhitespaceSplit"))
    left = "[^\\W_]" if "Precompiled" in kinds else f"[{_solid()}]"
    # (CR LF is one cluster: it may normalize unlike a lone CR.)
    pattern = f"(?<={left})(?<![{_PREPEND}])(?=[{cuts}](?![{_EXTEND}]))(?!\\r\\n)"
    name = "white space after a letter, digit, punctuation or symbol"
    both = re.compile(pattern)
    if kind != "Metaspace" or model.get("type") != "Unigram" or not piece_normalizers(norms):
        return CutRule(name, both)
    return unigram_rule(name, both, tokenizer, kinds, pre, model, added_chars)


def _bert_rule(
    tokenizer: Any,
    norms: list[dict[str, Any]],
    model: dict[str, Any],
    added: list[str],
    added_chars: set[str],
    plain_added: bool,
) -> CutRule:
    """BertNormalizer and BertPreTokenizer: white space, punctuation, CJK ideographs, and for
    WordPiece inside words longer than ``max_input_chars_per_word``."""
    ws = WHITE_SPACE
    alternatives = [f"(?<![{ws}])(?=[{_whitespace_cuts(tokenizer, False)}])"]
    classes = _bert_classes()
    if plain_added:
        # No cut beside a character of an added token (its match cannot span the cut).
        punct = _class([c for c in classes["punct"] if chr(c) not in added_chars])
        alternatives.append(f"(?<=[{punct}])|(?<![{ws}])(?=[{punct}])")
        chinese = bool(norms) and norms[0].get("handle_chinese_chars", True)
        if chinese and not any(_CJK.match(c) for c in added_chars):
            alternatives.append(f"(?<=[{CJK}])|(?<![{ws}])(?=[{CJK}])")
    long_word = None
    if model.get("type") == "WordPiece":
        m = int(model.get("max_input_chars_per_word", 100))
        in_word = set(classes["word"]) | set(classes["silent"])
        # An added token inside a long word would split it: each must start and end with a
        # character no long word holds, and be too short to sit inside the counted run.
        if all(
            t and len(t) <= m and ord(t[0]) not in in_word and ord(t[-1]) not in in_word
            for t in added
        ):
            long_word = m
    return CutRule(
        "WordPiece/BertPreTokenizer",
        re.compile("|".join(alternatives)),
        long_word,
        _class(list(classes["word"])) if long_word else "",
        _class(list(classes["silent"])) if long_word else "",
    )


def _byte_level_rule(
    tokenizer: Any,
    pre: dict[str, Any],
    kinds: list[str],
    model: dict[str, Any],
    added_chars: set[str],
    plain_added: bool,
) -> CutRule:
    """ByteLevel: white space the normalizer keeps as such, and where the regex's class changes
    (letters, numbers, other) outside a contraction, at a normalization boundary."""
    ws = WHITE_SPACE
    first_space = bool(pre.get("add_prefix_space"))
    cuts = _whitespace_cuts(tokenizer, first_space)
    spaces = f"(?<![{ws}])(?=[{cuts}])"
    alternatives = []
    # (Lowercasing can change a character's class at its ends: "İ" lowercases to "i" and a
    # combining dot. Only one normal form, or none, is tabled.)
    inner = []
    form = cast(Form, kinds[0]) if kinds else None
    if len(kinds) <= 1 and "Lowercase" not in kinds and plain_added and not first_space:
        c = _byte_level_classes(form)
        for left, right in (("L", "NO"), ("N", "LO"), ("O", "LN")):
            right_class = "".join(c[f"{k}_first"] for k in right)
            alternatives.append(f"(?<=[{c[left + '_last']}])(?=[{right_class}])")
        inner = [f"(?<=[{c[f'{k}_last']}])(?=[{c[f'{k}_first']}])" for k in "LN"]
    if not alternatives:
        return CutRule("ByteLevel", re.compile(spaces))
    if added_chars:
        # No cut beside a character of an added token (its match cannot span the cut).
        bad = _class(sorted(ord(c) for c in added_chars))
        alternatives = [f"(?<![{bad}])(?![{bad}])(?:{a})" for a in alternatives]
        inner = [f"(?<![{bad}])(?![{bad}])(?:{a})" for a in inner]
    both = re.compile("|".join([spaces, *alternatives]))
    junctions = _merge_junctions(model)
    if junctions is None:
        return CutRule("ByteLevel", both)
    return CutRule(
        "ByteLevel", both, inner=re.compile("|".join(inner)), junctions=junctions, form=form
    )


def _merge_junctions(model: dict[str, Any]) -> frozenset[int] | None:
    """The byte pairs a merge of a byte-level BPE joins (the last byte of its left part, the
    first of its right part), or None when a cut inside a piece is not covered: not BPE, or
    one whose result depends on the word's ends (a subword prefix or end-of-word suffix) or
    that looks whole words up first (``ignore_merges``)."""
    if model.get("type") != "BPE" or model.get("dropout") or model.get("ignore_merges"):
        return None
    if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        return None
    byte = _byte_of_char()
    out = set()
    for merge in model.get("merges") or []:
        left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
        if not left or not right or left[-1] not in byte or right[0] not in byte:
            return None  # not a byte-level vocabulary
        out.add(byte[left[-1]] << 8 | byte[right[0]])
    return frozenset(out)
