"""Byte tokenizer: lossless round trip, specials, vocabulary bounds."""

import pytest

from p2p_runtime.tokenizer import BOS_ID, EOS_ID, PRINTABLE_IDS, ByteTokenizer

TEXTS = ["", "hello", "Document 0: hi hi hi", "line1\nline2\ttab", "héllo wörld",
         "日本語テキスト", "emoji 🚀🔥", "\x00\x7f control", "a" * 5000]


@pytest.mark.parametrize("text", TEXTS)
def test_round_trip_is_lossless(text):
    tok = ByteTokenizer()
    assert tok.decode(tok.encode(text)) == text
    assert tok.decode(tok.encode(text, add_bos=True)) == text


def test_ids_are_utf8_bytes_plus_bos():
    tok = ByteTokenizer()
    assert tok.encode("hé", add_bos=True) == [BOS_ID, 0x68, 0xC3, 0xA9]


def test_specials_are_skipped_or_rendered():
    tok = ByteTokenizer()
    ids = [BOS_ID, *tok.encode("ab"), EOS_ID]
    assert tok.decode(ids) == "ab"
    assert tok.decode(ids, skip_special_tokens=False) == "<s>ab</s>"


def test_vocab_size_limits():
    with pytest.raises(ValueError, match=">= 259"):
        ByteTokenizer(vocab_size=258)
    tok = ByteTokenizer(vocab_size=300)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([300])
    assert tok.decode([299]) == ""  # unused ids exist but render as nothing


def test_printable_ids_decode_to_one_visible_char_each():
    tok = ByteTokenizer()
    for tid in PRINTABLE_IDS:
        text = tok.decode([tid])
        assert len(text) == 1 and text.isprintable()
