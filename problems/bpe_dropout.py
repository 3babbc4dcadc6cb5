"""BPE-dropout (Provilkov et al., 2020): a BPE model's merges with seeded random refusals.

SentencePiece's own sampling (`enable_sampling`) draws other refusals in each process
even with its seed set, so datagen could not repeat its shards; the merges run here
instead, with draws from a `random.Random` the caller seeds.
"""

from __future__ import annotations

import random

from sentencepiece import sentencepiece_model_pb2

from t2t_lite.problems.vocab import SPACE_MARK


class Merges:
    """A BPE model's merges, applied in Python so that their random refusals are seeded.

    SentencePiece merges the adjacent pair of symbols whose joined piece has the best
    score (the earliest learned), the leftmost of equals first, until no pair joins into
    a piece; a symbol that is not a piece is spelt with its UTF-8 byte pieces.
    """

    def __init__(self, model_proto: bytes):
        proto = sentencepiece_model_pb2.ModelProto.FromString(model_proto)
        self.score, self.ids, self.bytes = {}, {}, {}
        for index, piece in enumerate(proto.pieces):
            if piece.type == piece.NORMAL:
                self.score[piece.piece] = piece.score
                self.ids[piece.piece] = index
            elif piece.type == piece.BYTE:
                self.bytes[int(piece.piece[3:5], 16)] = index

    def sample(self, word: str, dropout: float, rng: random.Random) -> list:
        """Ids of `▁word`, each merge refused with probability `dropout`."""
        score = self.score
        symbols = [SPACE_MARK, *word]
        names = list(range(len(symbols)))  # which symbol a refusal was about
        refused = set()
        fresh = len(symbols)
        while len(symbols) > 1:
            best, best_score = -1, None
            for i in range(len(symbols) - 1):
                joined = score.get(symbols[i] + symbols[i + 1])
                if joined is None or (best_score is not None and joined <= best_score):
                    continue
                if (names[i], names[i + 1]) in refused:
                    continue
                best, best_score = i, joined
            if best < 0:
                break
            if dropout and rng.random() < dropout:
                refused.add((names[best], names[best + 1]))
                continue
            symbols[best : best + 2] = [symbols[best] + symbols[best + 1]]
            names[best : best + 2] = [fresh]
            fresh += 1
        ids = []
        for symbol in symbols:
            found = self.ids.get(symbol)
            if found is None:
                ids += [self.bytes[b] for b in symbol.encode("utf-8")]
            else:
                ids.append(found)
        return ids
