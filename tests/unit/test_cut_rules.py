"""The character classes behind the cut rules (models/text/tokens/char_classes.py, cuts.py) agree with what the
tokenizers library's own normalizers and pre-tokenizers do, character by character: the facts
the lemma in models/text/tokens/bounded.py rests on."""

from __future__ import annotations

import re
import unicodedata

import pytest
from tokenizers import normalizers, pre_tokenizers

from models.text.tokens import char_classes, cuts
from tests.utils.tiny_tokenizers import KINDS, tokenizer_json

BMP = [chr(c) for c in range(0x10000) if not 0xD800 <= c < 0xE000]


def _members(body: str) -> list[str]:
    """The characters of the BMP a class body holds."""
    pattern = re.compile(f"[{body}]")
    return [c for c in BMP if pattern.match(c)]


def test_white_space_is_what_byte_level_and_bert_split_at() -> None:
    """WHITE_SPACE is oniguruma's \\s in the ByteLevel regex and Rust's is_whitespace in
    BertPreTokenizer, over the whole BMP (not Python's isspace, which adds U+001C..U+001F)."""
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bert = pre_tokenizers.BertPreTokenizer()
    ours = set(_members(char_classes.WHITE_SPACE))
    # "a", then c twice, then "a": four pieces exactly when c is \s (a run before a non-space
    # leaves its last space to a piece of its own), but for U+0020, which joins the "a" after.
    four = {c for c in BMP if len(byte_level.pre_tokenize_str(f"a{c}{c}a")) == 4}
    assert four | {" "} == ours
    assert [p for p, _ in byte_level.pre_tokenize_str("a  a")] == ["a", "Ġ", "Ġa"]
    split = {c for c in BMP if [p for p, _ in bert.pre_tokenize_str(f"a{c}a")] == ["a", "a"]}
    assert split == ours


def test_cjk_ranges_are_what_bert_normalizer_pads() -> None:
    normalizer = normalizers.BertNormalizer(clean_text=False, lowercase=False)
    padded = {c for c in BMP if normalizer.normalize_str(c) == f" {c} "}
    assert padded == set(_members(char_classes.CJK))
    for code in (0x20000, 0x2A6DF, 0x2A700, 0x2B81F, 0x2B920, 0x2CEAF, 0x2F800, 0x2FA1F):
        assert normalizer.normalize_str(chr(code)) == f" {chr(code)} "
    for code in (0x2A6E0, 0x2B820, 0x2CEB0, 0x2FA20, 0x1FFFF):
        assert normalizer.normalize_str(chr(code)) == chr(code)


def test_bert_punctuation_is_isolated_and_long_word_characters_stay_in_the_word() -> None:
    classes = char_classes._bert_classes()
    bert = pre_tokenizers.BertPreTokenizer()
    for code in classes["punct"]:
        assert len(bert.pre_tokenize_str(f"a{chr(code)}a")) == 3, hex(code)
    # A counted character normalizes, under either casing, to one or more characters that
    # are not all stripped and that split nothing; a passed-over one at most disappears.
    for lowercase in (True, False):
        normalizer = normalizers.BertNormalizer(lowercase=lowercase)
        for code in classes["word"]:
            n = normalizer.normalize_str(chr(code))
            assert n and any(unicodedata.category(c) != "Mn" for c in n), hex(code)
            assert len(bert.pre_tokenize_str(f"a{n}a")) == 1, hex(code)
        for code in classes["silent"]:
            n = normalizer.normalize_str(chr(code))
            assert len(bert.pre_tokenize_str(f"a{n}a")) == 1, hex(code)


@pytest.mark.parametrize("form", [None, "NFC", "NFKC"])
def test_byte_level_classes_split_where_the_library_splits(form: str | None) -> None:
    """A character of a ``_last`` class followed by one of another class's ``_first``, both
    normalized as the library does: the pre-tokenizer cuts between them."""
    classes = char_classes._byte_level_classes(form)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    normalizer = {"NFC": normalizers.NFC(), "NFKC": normalizers.NFKC()}.get(form or "")
    probe = {"L": "a", "N": "1", "O": "!"}

    def norm(text: str) -> str:
        return normalizer.normalize_str(text) if normalizer else text

    def splits_between(left: str, right: str) -> bool:
        """The two normalize apart, and a piece starts where the right one does."""
        joined = norm(left + right)
        starts = {start for _, (start, _) in byte_level.pre_tokenize_str(joined)}
        return joined == norm(left) + norm(right) and len(norm(left)) in starts

    for kind in "LNO":
        other = next(k for k in "LNO" if k != kind)
        for c in _members(classes[f"{kind}_last"]):
            assert splits_between(c, probe[other]), (form, hex(ord(c)))
        for c in _members(classes[f"{kind}_first"]):
            assert splits_between(probe[other], c), (form, hex(ord(c)))


def test_solid_characters_neither_vanish_nor_end_in_white_space() -> None:
    normalizer = normalizers.Sequence(
        [normalizers.NFKC(), normalizers.BertNormalizer(lowercase=True)]
    )
    white = re.compile(f"[{char_classes.WHITE_SPACE}]")
    for c in _members(char_classes._solid()):
        for form in ("NFC", "NFD", "NFKC", "NFKD"):
            n = unicodedata.normalize(form, c)
            assert n and not white.match(n[-1]), (form, hex(ord(c)))
            stripped = "".join(x for x in n if unicodedata.category(x) != "Mn")
            assert stripped and not white.match(stripped[-1]), (form, hex(ord(c)))
        assert normalizer.normalize_str(c).strip(), hex(ord(c))


def test_each_tiny_tokenizer_gets_its_family_rule() -> None:
    names = {kind: cuts.cut_rule(tokenizer_json(kind)).name for kind in KINDS}
    assert names["wordpiece"] == "WordPiece/BertPreTokenizer"
    assert names["bytelevel"] == names["modernbert"] == "ByteLevel"
    assert names["unigram"].startswith("white space")
    rule = cuts.cut_rule(tokenizer_json("wordpiece"))
    assert rule.long_word == 40  # the tiny vocabulary's max_input_chars_per_word


def test_byte_level_characters_map_back_to_the_bytes() -> None:
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    byte = char_classes._byte_of_char()
    assert sorted(byte) == sorted(pre_tokenizers.ByteLevel.alphabet())
    text = "a \t\n東京ภาษา🙂\x00\x7f\u00ad\u00a0é"
    [(piece, _)] = byte_level.pre_tokenize_str(text)
    assert bytes(byte[c] for c in piece) == text.encode()


def test_merge_junctions_are_the_bytes_each_merge_joins() -> None:
    import json

    spec = json.loads(tokenizer_json("bytelevel"))
    junctions = cuts._merge_junctions(spec["model"])
    assert junctions is not None
    assert ord(" ") << 8 | ord("t") in junctions  # the first merge: "Ġ" + "t"
    spec["model"]["ignore_merges"] = True
    assert cuts._merge_junctions(spec["model"]) is None
