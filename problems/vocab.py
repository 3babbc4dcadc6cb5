"""Shared subword vocabularies: SentencePiece BPE models with tensor2tensor's reserved ids.

A model trained by `train_sentencepiece` has

    id 0  <pad>   padding (DESIGN.md)
    id 1  </s>    end of sequence
    id 2  <unk>   never produced for text: unknown characters fall back to bytes
    ids 3..258    the 256 byte pieces <0x00>..<0xFF>
    ids 259..     the learned BPE pieces

and no beginning-of-sequence piece. Normalisation is the identity and whitespace is
kept as written, so `decode(encode(text)) == text` for every Unicode string. The one
character SentencePiece cannot represent as itself is its own space marker U+2581
"▁": `SentencePieceEncoder` writes it as its three UTF-8 byte pieces, in Python and in
the TensorFlow graph alike, so that it round-trips too. To do so both paths run the
model with its dummy prefix turned off and add (encode) or remove (decode) that one
leading space themselves; for text without U+2581 the ids are exactly those of plain
SentencePiece on `vocab.model`.

The same model file serves datagen (`SentencePieceEncoder.encode_batch`), tf.data,
decoding and exported SavedModels (`SentencePieceEncoder.tokenizer()`, built on
tensorflow-text's `SentencepieceTokenizer`).
"""

from __future__ import annotations

import io
import itertools
import os
import random
from collections.abc import Iterable

import sentencepiece as spm
import tensorflow as tf
from sentencepiece import sentencepiece_model_pb2

from t2t_lite.ids import EOS_ID, PAD_ID
from t2t_lite.problems.problem import TextEncoder

UNK_ID = 2
NUM_BYTE_PIECES = 256
# Reserved ids (pad, EOS, unk) plus byte pieces: the smallest vocabulary that can hold text.
MIN_VOCAB_SIZE = 3 + NUM_BYTE_PIECES + 1
SPACE_MARK = "\u2581"


def train_sentencepiece(
    sentences: Iterable[str],
    model_path: str,
    vocab_size: int,
    *,
    model_type: str = "bpe",
    character_coverage: float = 0.9995,
    num_threads: int | None = None,
    user_symbols: Iterable[str] = (),
) -> str:
    """Trains a SentencePiece model on `sentences` and writes it to `model_path`.

    The file appears complete or not at all (written to a temporary name, then renamed);
    a human-readable `<model_path minus .model>.vocab` listing goes beside it.

    Args:
        sentences: training text, one sentence per item (already a bounded sample:
            see `reservoir_sample`).
        model_path: where the `.model` file goes.
        vocab_size: total number of ids, reserved ones included.
        model_type: "bpe" (the paper's byte-pair encoding) or "unigram".
        character_coverage: share of characters that become pieces of their own; the
            rest are spelt with byte pieces.
        num_threads: SentencePiece trainer threads; default: one per CPU.
        user_symbols: pieces that are always one id each, whatever the text around them
            (e.g. `▁(NP`, a tree bracket with the space before it); they count in
            `vocab_size`.

    Returns:
        `model_path`.

    Raises:
        ValueError: when there is no text, or when `vocab_size` is too small or too
            large for the text (SentencePiece's message is included).
    """
    if vocab_size < MIN_VOCAB_SIZE:
        raise ValueError(
            f"vocab_size {vocab_size} is too small: ids 0-2 are reserved and 256 go to byte "
            f"pieces, so at least {MIN_VOCAB_SIZE} are needed (the paper uses 32,000-37,000)"
        )
    # Streamed: SentencePiece keeps its own copy, so a second one here would double memory.
    sentences = (s for s in sentences if s.strip())
    first = next(sentences, None)
    if first is None:
        raise ValueError(f"no text to train the vocabulary {model_path} on (empty corpus)")
    counted = _Counted(itertools.chain([first], sentences))
    buffer = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=counted,
            model_writer=buffer,
            model_type=model_type,
            vocab_size=vocab_size,
            pad_id=PAD_ID,
            eos_id=EOS_ID,
            unk_id=UNK_ID,
            bos_id=-1,
            byte_fallback=True,
            normalization_rule_name="identity",
            remove_extra_whitespaces=False,
            character_coverage=character_coverage,
            input_sentence_size=0,
            num_threads=num_threads or os.cpu_count() or 1,
            minloglevel=2,
            user_defined_symbols=list(user_symbols),
        )
    except RuntimeError as error:
        raise ValueError(
            f"SentencePiece could not train {model_path} with vocab_size={vocab_size} on "
            f"{counted.count:,} sentences: {error}. Choose another vocab size (--vocab_size)."
        ) from None
    # The trainer records its thread count; drop it so the file depends on text and settings only.
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(buffer.getvalue())
    proto.trainer_spec.ClearField("num_threads")
    model = proto.SerializeToString()
    _write_atomically(model_path, model)
    processor = spm.SentencePieceProcessor(model_proto=model)
    listing = "".join(
        f"{processor.id_to_piece(i)}\t{processor.get_score(i)}\n"
        for i in range(processor.get_piece_size())
    )
    _write_atomically(os.path.splitext(model_path)[0] + ".vocab", listing.encode("utf-8"))
    return model_path


class _Counted:
    """An iterator that counts the items it has given."""

    def __init__(self, items):
        self._items = items
        self.count = 0

    def __iter__(self):
        return self

    def __next__(self):
        item = next(self._items)
        self.count += 1
        return item


def reservoir_sample(items: Iterable[str], size: int, seed: int = 0) -> list:
    """A uniform sample of at most `size` items in one pass, in their original order.

    Bounds the memory and time of vocabulary training on corpora of tens of millions
    of sentences; deterministic for a given `seed` and input.
    """
    rng = random.Random(seed)
    sample = []  # (position, item)
    for position, item in enumerate(items):
        if len(sample) < size:
            sample.append((position, item))
        else:
            slot = rng.randrange(position + 1)
            if slot < size:
                sample[slot] = (position, item)
    return [item for _, item in sorted(sample)]


class SentencePieceEncoder(TextEncoder):
    """A `TextEncoder` over a SentencePiece model with ids 0 = pad, 1 = EOS.

    Attributes:
        model_path: the `.model` file; the decoder and exporter read it from here.
        model_proto: its bytes (what a SavedModel embeds).
        user_symbols: the pieces that are always one id (see `train_sentencepiece`).
    """

    def __init__(self, model_path: str):
        self.model_path = str(model_path)
        with tf.io.gfile.GFile(self.model_path, "rb") as f:
            self.model_proto = f.read()
        try:
            self._processor = spm.SentencePieceProcessor(model_proto=self.model_proto)
        except RuntimeError as error:
            raise ValueError(f"{self.model_path} is not a SentencePiece model: {error}") from None
        self._check_reserved_ids()
        proto = sentencepiece_model_pb2.ModelProto.FromString(self.model_proto)
        self.user_symbols = [p.piece for p in proto.pieces if p.type == p.USER_DEFINED]
        self._no_prefix_proto = _without_dummy_prefix(self.model_proto)
        self._no_prefix = spm.SentencePieceProcessor(model_proto=self._no_prefix_proto)
        self._mark_ids = [self._processor.piece_to_id(f"<0x{b:02X}>") for b in SPACE_MARK.encode()]
        self._merges = None  # built on first use by `sample_batch`

    def _check_reserved_ids(self) -> None:
        processor = self._processor
        # An empty or piece-less file parses as a model with no pieces, which every id
        # lookup below would reject with an IndexError.
        if processor.get_piece_size() <= EOS_ID:
            raise ValueError(
                f"{self.model_path} is not a SentencePiece model: it has "
                f"{processor.get_piece_size()} pieces ({len(self.model_proto)} bytes); "
                "rebuild it with `python -m t2t_lite.datagen`"
            )
        found = (processor.pad_id(), processor.eos_id(), processor.piece_to_id("<0xE2>"))
        if found[:2] != (PAD_ID, EOS_ID) or processor.is_unknown(found[2]):
            raise ValueError(
                f"vocabulary {self.model_path} does not match t2t_lite's ids: it has pad id "
                f"{found[0]} and EOS id {found[1]} (need 0 and 1) and byte pieces "
                f"{'missing' if processor.is_unknown(found[2]) else 'present'} (needed); "
                "rebuild it with `python -m t2t_lite.datagen`"
            )

    @property
    def vocab_size(self) -> int:
        return self._processor.get_piece_size()

    def pieces(self) -> list:
        """The piece of every id, in id order (`▁the`, `ing`, `<0x41>`, ...)."""
        return [self._processor.id_to_piece(i) for i in range(self.vocab_size)]

    def encode(self, text: str) -> list:
        """Ids of `text` (no EOS): every id is >= 2."""
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: list, num_threads: int | None = None) -> list:
        """Ids of each of `texts` (no EOS), using `num_threads` threads (default: one per CPU)."""
        ids = self._processor.encode(list(texts), num_threads=num_threads or os.cpu_count() or 1)
        for index, text in enumerate(texts):
            if SPACE_MARK in text:
                ids[index] = self._encode_with_marks(text)
        return ids

    def sample_batch(self, texts: list, dropout: float, seed: int) -> list:
        """Ids of each of `texts` (no EOS) by BPE-dropout (Provilkov et al., 2020).

        Each word is merged as `encode` merges it, best merge first, except that each
        merge is refused with probability `dropout` when it comes up (as SentencePiece's
        own sampling does), so a word may come out in smaller pieces. At 0 the ids equal
        `encode`'s. The draws come from `random.Random(seed)`: the result depends on
        `texts`, `dropout` and `seed` only, in any process. Empty texts and texts
        holding U+2581 keep `encode`'s ids.
        """
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"BPE-dropout must be at least 0 and below 1; got {dropout}")
        if self.user_symbols:
            raise ValueError(
                f"{self.model_path}: BPE-dropout applies to vocabularies without user symbols; "
                f"this one has {len(self.user_symbols)}"
            )
        if self._merges is None:
            from t2t_lite.problems.bpe_dropout import Merges  # imports this module

            self._merges = Merges(self.model_proto)
        rng = random.Random(seed)
        ids = []
        for text in texts:
            if not text or SPACE_MARK in text:
                ids.append(self.encode_batch([text], num_threads=1)[0])
                continue
            row = []
            for word in text.split(" "):
                row += self._merges.sample(word, dropout, rng)
            ids.append(row)
        return ids

    def encode_words(self, words: list) -> list:
        """Ids of each of `words` as a word of a sentence: `▁word` (`▁` alone for "").

        A model without user symbols never merges across a space, so a sentence's ids
        are those of its space-separated words in turn (`text.split(" ")`, the first
        one included: the dummy prefix is its space). Words must not hold U+2581.
        """
        return self._no_prefix.encode([" " + word for word in words], num_threads=1)

    def _encode_with_marks(self, text: str) -> list:
        # Each U+2581 becomes its byte pieces; the text between marks is encoded as
        # SentencePiece would encode it after its dummy-prefix space (first part only).
        parts = text.split(SPACE_MARK)
        ids = self._no_prefix.encode(" " + parts[0]) if parts[0] else []
        for part in parts[1:]:
            ids += self._mark_ids + self._no_prefix.encode(part)
        return ids

    def decode(self, ids) -> str:
        """Text of `ids`, stopping at the first EOS and skipping padding."""
        kept = []
        for token_id in ids:
            token_id = int(token_id)
            if token_id == EOS_ID:
                break
            if token_id != PAD_ID:
                kept.append(token_id)
        text = self._no_prefix.decode(kept)
        return text[1:] if text.startswith(" ") else text  # The dummy-prefix space.

    def tokenizer(self) -> InGraphTokenizer:
        """The in-graph twin of `encode` / `decode` (tensorflow-text ops, SavedModel-ready)."""
        return InGraphTokenizer(self._no_prefix_proto, self._mark_ids)


class InGraphTokenizer(tf.Module):
    """`SentencePieceEncoder.encode` / `decode` as TensorFlow ops on string batches.

    Produces exactly the ids of the Python encoder. Keep it as an attribute of an
    exported `tf.Module` and the model bytes travel inside the SavedModel.
    """

    def __init__(self, no_prefix_proto: bytes, mark_ids: list):
        """Args: the model with its dummy prefix turned off; the byte-piece ids of U+2581."""
        import tensorflow_text as tf_text  # Here: importing it costs seconds.

        super().__init__(name="sentencepiece")
        self._sentencepiece = tf_text.SentencepieceTokenizer(
            model=no_prefix_proto, out_type=tf.int32
        )
        self._mark_ids = tf.constant(mark_ids, tf.int64)

    def tokenize(self, texts: tf.Tensor, add_eos: bool = True) -> tf.RaggedTensor:
        """Ids of a batch of strings.

        Args:
            texts: tf.string [B].
            add_eos: append EOS (id 1) to each row, as examples end.

        Returns:
            int64 RaggedTensor [B, (L)].
        """
        texts = tf.convert_to_tensor(texts, tf.string)
        parts = tf.strings.split(texts, sep=SPACE_MARK)  # [B, (P)]: text between marks
        flat = parts.flat_values  # [N]
        row_lengths = tf.repeat(parts.row_lengths(), parts.row_lengths())  # [N]
        index = tf.range(tf.size(flat, out_type=tf.int64)) - tf.repeat(
            parts.row_starts(), parts.row_lengths()
        )  # [N]: position of each part in its text
        prefixed = (index == 0) & (tf.strings.length(flat) > 0)
        flat = tf.where(prefixed, tf.strings.join([" ", flat]), flat)
        pieces = tf.cast(self._sentencepiece.tokenize(flat), tf.int64)  # [N, (L)]
        followed = index < row_lengths - 1  # [N]: a mark comes after this part
        marks = tf.RaggedTensor.from_row_lengths(
            tf.tile(self._mark_ids, [tf.reduce_sum(tf.cast(followed, tf.int32))]),
            tf.where(followed, tf.size(self._mark_ids, out_type=tf.int64), 0),
        )  # [N, (3 or 0)]
        pieces = tf.concat([pieces, marks], axis=1)
        ids = parts.with_flat_values(pieces).merge_dims(1, 2)  # [B, (L)]
        if add_eos:
            eos = tf.fill([ids.nrows(), 1], tf.constant(EOS_ID, tf.int64))
            ids = tf.concat([ids, eos], axis=1)
        return ids

    def detokenize(self, ids) -> tf.Tensor:
        """Text of each row of `ids`, up to its first EOS, padding skipped.

        Args:
            ids: integer [B, L] Tensor or [B, (L)] RaggedTensor.

        Returns:
            tf.string [B].
        """
        if isinstance(ids, tf.RaggedTensor):
            ids = ids.to_tensor(default_value=PAD_ID)
        ids = tf.cast(ids, tf.int32)  # [B, L]
        before_eos = tf.math.cumsum(tf.cast(ids == EOS_ID, tf.int32), axis=1) == 0
        kept = tf.ragged.boolean_mask(ids, before_eos & (ids != PAD_ID))
        text = self._sentencepiece.detokenize(kept)  # [B]
        return tf.strings.regex_replace(text, "^ ", "")  # The dummy-prefix space.


def _without_dummy_prefix(model_proto: bytes) -> bytes:
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model_proto)
    proto.normalizer_spec.add_dummy_prefix = False
    return proto.SerializeToString()


def _write_atomically(path: str, data: bytes) -> None:
    temporary = f"{path}.tmp-{os.getpid()}"
    with open(temporary, "wb") as f:
        f.write(data)
    os.replace(temporary, path)
