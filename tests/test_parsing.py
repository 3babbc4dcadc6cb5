"""The wsj_parsing problem on the real WSJ sample: datagen, the split, trees out, EVALB scores."""

import random
from collections import Counter

import pytest

from t2t_lite import hparams, problems
from t2t_lite.metrics import evalb
from t2t_lite.problems import trees
from t2t_lite.problems.corpus import DataError
from t2t_lite.problems.parsing import TreebankCorpus

CAT = "(S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .))"


def documented_split(file_id: str) -> str:
    """The sample split as the module docstring states it, by file number."""
    number = int(file_id[len("wsj_") : len("wsj_0000")])
    return "dev" if 160 <= number <= 169 else "test" if 170 <= number <= 179 else "train"


@pytest.fixture(scope="module")
def sample(shared_data):
    """{split: [raw tree line, ...]} of the shared sample, by the documented split."""
    folder = shared_data / "wsj_sample"
    lines = (folder / "wsj_0001-0179.oneline.mrg").read_text().splitlines()
    ids = (folder / "wsj_0001-0179.fileids").read_text().split()
    by_split = {"train": [], "dev": [], "test": []}
    for file_id, line in zip(ids, lines, strict=True):
        by_split[documented_split(file_id)].append(line)
    return by_split


def example_texts(line: str) -> tuple:
    tree = trees.preprocess(trees.parse_tree(line))
    return " ".join(trees.words(tree)), " ".join(trees.linearize(tree, leaves="word"))


@pytest.fixture(scope="module")
def generated(tmp_path_factory, shared_data):
    data_dir = str(tmp_path_factory.mktemp("data"))
    problem = problems.get("wsj_parsing")
    raw_dir = str(shared_data / "wsj_sample")
    metadata = problem.generate_data(data_dir, raw_dir, vocab_size=1000)
    assert metadata["status"] == "generated"
    return problem, data_dir, raw_dir


@pytest.fixture(scope="module")
def decoded(generated) -> dict:
    """{split: [(inputs text, targets text), ...]} of the generated examples, in read order."""
    problem, data_dir, _ = generated
    encoder = problem.encoders(data_dir)["inputs"]
    found = {}
    for split in ("train", "dev", "test"):
        found[split] = []
        for example in problem.examples(split, data_dir).as_numpy_iterator():
            assert example["inputs"][-1] == example["targets"][-1] == problems.EOS_ID
            found[split].append(
                (encoder.decode(example["inputs"]), encoder.decode(example["targets"]))
            )
    return found


def test_registry_decode_defaults_and_hparams():
    problem = problems.get("wsj_parsing")
    assert (problem.beam_size, problem.alpha, problem.extra_decode_length) == (21, 0.3, 300)
    assert problem.eval_metric == "parse_f1" and problem.vocab_size == 16_000
    paper = hparams.get("transformer_parsing")
    assert (paper.num_encoder_layers, paper.num_decoder_layers) == (4, 4)
    assert (paper.hidden_size, paper.filter_size, paper.num_heads) == (1024, 4096, 16)
    assert paper.dropout == paper.attention_dropout == 0.2 < hparams.get("transformer_big").dropout
    small = hparams.get("transformer_parsing_small")
    assert (small.num_encoder_layers, small.hidden_size, small.dropout) == (2, 256, 0.2)
    assert not paper.shared_embedding and not small.shared_embedding
    assert not paper.normalize_first and small.normalize_first


def test_examples_decode_to_the_words_and_linearized_trees(decoded, sample):
    for split in ("dev", "test"):
        assert decoded[split] == [example_texts(x) for x in sample[split]]
    train = decoded["train"]
    assert Counter(train) == Counter(example_texts(x) for x in sample["train"])
    assert train[:20] != [example_texts(x) for x in sample["train"][:20]], "shuffled at datagen"
    # The first dev tree (wsj_0160), linearized by hand from its treebank line.
    words, targets = decoded["dev"][0]
    assert words.startswith("Savin Corp. reported a third-quarter net loss of $ 35.2 million ,")
    assert targets.startswith(
        "(S (NP Savin Corp. )NP (VP reported (NP (NP a third-quarter net loss )NP (PP of (NP (NP"
    )


def test_split_is_disjoint_complete_and_as_documented(generated, decoded, sample):
    problem, data_dir, raw_dir = generated
    metadata = problem.generate_data(data_dir, raw_dir, vocab_size=1000)
    assert metadata["status"] == "up to date"
    counts = {split: info["examples"] for split, info in metadata["splits"].items()}
    # Trees per file range, counted from wsj_0001-0179.fileids by hand (awk).
    assert counts == {"train": 3396, "dev": 105, "test": 168}
    assert sum(counts.values()) == 3669 == sum(len(lines) for lines in sample.values())
    everything = Counter()
    for split in ("train", "dev", "test"):
        everything.update(decoded[split])
    all_lines = [line for lines in sample.values() for line in lines]
    assert everything == Counter(example_texts(line) for line in all_lines)
    dev_gold = problem.reference_trees("dev", data_dir, raw_dir)
    assert problem.reference_inputs(dev_gold) == [p[0] for p in decoded["dev"]]


def pretty(line: str) -> str:
    """A one-line tree written over several lines, as PTB .mrg files are."""
    return line.replace(" (", "\n    (").replace("((", "( (", 1) + "\n"


def test_ptb_folder_gets_the_standard_section_split(tmp_path, sample):
    lines = sample["dev"][:12]
    files = {"00": lines[0:2], "02": lines[2:4], "21": lines[4:6], "22": lines[6:8]}
    files.update({"23": lines[8:10], "24": lines[10:12]})
    for section, chunk in files.items():
        folder = tmp_path / "wsj" / section
        folder.mkdir(parents=True)
        (folder / f"wsj_{section}01.mrg").write_text("".join(pretty(x) for x in chunk))
    corpus = TreebankCorpus(str(tmp_path))
    assert corpus.split_name == "standard"
    got = {split: [p[2:] for p in corpus.pairs(split)] for split in corpus.splits}
    assert got == {
        "train": [example_texts(x) for x in lines[2:6]],
        "dev": [example_texts(x) for x in lines[6:8]],
        "test": [example_texts(x) for x in lines[8:10]],
    }
    assert [p[:2] for p in corpus.pairs("dev")] == [
        (str(tmp_path / "wsj" / "22" / "wsj_2201.mrg"), 1),
        (str(tmp_path / "wsj" / "22" / "wsj_2201.mrg"), 2),
    ]


def test_split_named_files_and_layout_errors(tmp_path, sample):
    for number, split in enumerate(("train", "dev", "test")):
        (tmp_path / f"{split}.trees").write_text("\n".join(sample["test"][number::3]) + "\n")
    corpus = TreebankCorpus(str(tmp_path))
    assert [p[2:] for p in corpus.pairs("dev")] == [example_texts(x) for x in sample["test"][1::3]]

    bad = tmp_path / "bad"
    bad.mkdir()
    with pytest.raises(DataError, match=r"bad: no tree files"):
        TreebankCorpus(str(bad))
    (bad / "x.mrg").write_text(sample["dev"][0] + "\n" + sample["dev"][1] + "\n")
    with pytest.raises(DataError, match=r"x\.mrg: cannot tell which WSJ file"):
        TreebankCorpus(str(bad))
    (bad / "x.fileids").write_text("wsj_0001.mrg\n")
    with pytest.raises(DataError, match=r"x\.fileids: names 1 file ids but .*x\.mrg holds 2"):
        TreebankCorpus(str(bad))
    (bad / "x.fileids").write_text("wsj_0001.mrg\nwsj_0165.mrg\n")
    with pytest.raises(DataError, match=r"no trees for split\(s\) test under the sample split"):
        TreebankCorpus(str(bad))
    (bad / "x.fileids").write_text("wsj_0001.mrg\nsomething\n")
    with pytest.raises(DataError, match=r"x\.fileids:2: 'something' is not a WSJ file id"):
        TreebankCorpus(str(bad))


def test_score_hand_derived():
    problem = problems.get("wsj_parsing")
    words = "The cat sat ."
    # Right-branching: after "." is deleted, S(0,3) S(1,3) S(2,3) against S(0,3) NP(0,2)
    # VP(2,3): one match of three on each side.
    hypothesis = problem.postprocess("(S XX (S XX (S XX XX )S )S )S", words)
    assert hypothesis == "(S (XX The) (S (XX cat) (S (XX sat) (XX .))))"
    perfect = problem.postprocess(" ".join(trees.linearize(trees.parse_tree(CAT))), words)
    scores = problem.score([hypothesis, perfect], [CAT, f"( {CAT} )"])
    assert scores["precision"] == scores["recall"] == pytest.approx(400 / 6)
    assert scores["f1"] == pytest.approx(400 / 6)
    assert (scores["valid"], scores["errors"], scores["complete_match"]) == (2, 0, 50.0)
    alone = problem.score([hypothesis], [CAT])
    assert alone["f1"] == pytest.approx(100 / 3) and alone["tagging_accuracy"] == 100.0
    # Without the gold tags, the placeholder-tagged "." is not deleted: a length error.
    assert evalb.evalb_score([CAT], [hypothesis]).all.errors == 1
    assert problem.score([""], [CAT])["skipped"] == 1


def test_right_branching_through_score_equals_evalb_on_raw_gold(generated, sample):
    problem, data_dir, raw_dir = generated
    gold = problem.reference_trees("dev", data_dir, raw_dir)
    inputs = problem.reference_inputs(gold)
    baseline = [trees.to_string(trees.right_branching(text.split())) for text in inputs]
    scores = problem.score(baseline, gold)
    # Directly: EVALB on the raw treebank lines (traces, function tags, outer bracket) against
    # right-branching trees that carry the gold tags. Preprocessing removes the label-less
    # outer bracket, which EVALB counts as a gold bracket unless told to ignore it.
    raw = sample["dev"]
    tagged = []
    for line in raw:
        tree = trees.preprocess(trees.parse_tree(line))
        tagged.append(trees.right_branching(trees.words(tree), trees.tags(tree)))
    direct = evalb.evalb_score(raw, tagged, ignore_outer_bracket=True)
    assert direct.all.errors == 0 and direct.all.valid == 105 == scores["valid"]
    assert scores["f1"] == pytest.approx(direct.f1, abs=1e-9)
    assert (scores["precision"], scores["recall"]) == (direct.all.precision, direct.all.recall)
    assert 0 < scores["f1"] < 30


def test_garbage_output_still_gives_trees_over_the_input_words(generated):
    problem, data_dir, raw_dir = generated
    encoder = problem.encoders(data_dir)["inputs"]
    gold = problem.reference_trees("dev", data_dir, raw_dir)
    inputs = problem.reference_inputs(gold)
    rng = random.Random(0)
    hypotheses = []
    for text in inputs:
        ids = [rng.randrange(2, encoder.vocab_size) for _ in range(rng.randrange(0, 120))]
        garbage = encoder.decode(ids)
        garbage += " " + " ".join(rng.choice(["(NP", ")VP", "XX", "(", ")", "(S"]) for _ in ids)
        hypothesis = problem.postprocess(garbage, text)
        assert trees.words(trees.parse_tree(hypothesis)) == text.split()
        hypotheses.append(hypothesis)
    scores = problem.score(hypotheses, gold)
    assert (scores["valid"], scores["errors"], scores["skipped"]) == (105, 0, 0)
    assert problem.postprocess(")S )S XX", "") == ""


def test_gold_linearization_scores_100_and_errors_name_the_tree(generated, decoded):
    problem, data_dir, raw_dir = generated
    gold = problem.reference_trees("test", data_dir, raw_dir)
    outputs = [p[1] for p in decoded["test"]]
    inputs = problem.reference_inputs(gold)
    hypotheses = [problem.postprocess(out, text) for out, text in zip(outputs, inputs)]
    scores = problem.score(hypotheses, gold)
    assert (scores["f1"], scores["complete_match"], scores["valid"]) == (100.0, 100.0, 168)
    with pytest.raises(ValueError, match="2 hypotheses but 1 reference"):
        problem.score(hypotheses[:2], gold[:1])
    with pytest.raises(ValueError, match=r"hypothesis 2, tree 1, line 1: .*never closed"):
        problem.score([hypotheses[0], "(S (NP (DT a)"], gold[:2])


def test_read_references_of_a_multiline_mrg_file(tmp_path, sample):
    path = tmp_path / "wsj_2301.mrg"
    path.write_text("".join(pretty(line) for line in sample["test"][:5]))
    problem = problems.get("wsj_parsing")
    expected = [trees.to_string(trees.preprocess(trees.parse_tree(x))) for x in sample["test"][:5]]
    assert problem.read_references(path) == expected


def test_small_parsing_model_has_separate_source_and_target_embeddings():
    from t2t_lite.models import build_transformer

    hp = hparams.get("transformer_parsing_small")
    model = build_transformer(hp, 1000, non_copy_ids=[3, 4])  # the pointer adds no weights
    d, f, v = 256, 1024, 1000
    attention = 4 * d * d + 4 * d  # query, key, value, output projections with biases
    feed_forward = 2 * d * f + f + d
    encoder_layer = attention + feed_forward + 2 * 2 * d  # two layer norms
    decoder_layer = 2 * attention + feed_forward + 3 * 2 * d
    final_norms = 2 * 2 * d  # pre-norm: after the encoder and the decoder stacks
    embeddings = 2 * v * d  # source; target (tied to the pre-softmax projection)
    assert model.count_params() == 2 * encoder_layer + 2 * decoder_layer + final_norms + embeddings


def _brackets_and_copies(problem, data_dir, split="train", count=60):
    """(bracket ids, [(input ids, target ids)]) of the first `count` examples of `split`.

    Train examples: a dev or test tree may hold a label that no training tree has, which the
    vocabulary then spells in pieces (and which no search can output).
    """
    pieces = problem.encoders(data_dir)["targets"].pieces()
    brackets = {i for i, p in enumerate(pieces) if p[:1] == "\u2581" and p[1:2] in "()" and p[2:]}
    examples = [
        (list(e["inputs"]), list(e["targets"]))
        for e in problem.examples(split, data_dir).take(count).as_numpy_iterator()
    ]
    return brackets, examples


def _phrase_labels(tree) -> set:
    if tree.is_preterminal:
        return set()
    return {tree.label}.union(*(_phrase_labels(child) for child in tree.children))


def test_brackets_are_single_ids_and_targets_copy_the_input_pieces(generated, sample):
    problem, data_dir, _ = generated
    brackets, examples = _brackets_and_copies(problem, data_dir)
    # An opening and a closing id for each phrase label of the training trees.
    labels = set().union(
        *(_phrase_labels(trees.preprocess(trees.parse_tree(line))) for line in sample["train"])
    )
    assert len(brackets) == 2 * len(labels)
    assert sorted(problem.target_non_copy_ids(data_dir)) == sorted(brackets)
    for inputs, targets in examples:
        assert [t for t in targets if t not in brackets] == inputs  # words, then EOS


def _feed(constraint, inputs, tokens):
    """Allowed-token checks along `tokens` (batch of one): the first refused position, or None."""
    import tensorflow as tf

    c = constraint(tf.constant([inputs]), tf.constant([len(inputs) + 300]))
    state = c.initial_state()
    for i, token in enumerate(tokens):
        if not c.allowed(state, tf.constant(i)).numpy()[0, token]:
            return i
        state = c.update(state, tf.constant([token]))
    return None


def _feed_rows(constraint, examples):
    """`_feed` of every (inputs, targets) at once, as rows of one batch (as a search runs)."""
    import tensorflow as tf

    from t2t_lite.search import pad_batch

    inputs = pad_batch([i[:-1] for i, _ in examples])  # the same EOS-terminated rows
    lengths = [len(i) + 300 for i, _ in examples]
    c = constraint(tf.constant(inputs), tf.constant(lengths))
    state = c.initial_state()
    refused = [None] * len(examples)
    for step in range(max(len(t) for _, t in examples)):
        allowed = c.allowed(state, tf.constant(step)).numpy()
        tokens = []
        for row, (_, targets) in enumerate(examples):
            if step < len(targets):
                if refused[row] is None and not allowed[row, targets[step]]:
                    refused[row] = step
                tokens.append(targets[step])
            else:
                tokens.append(0)  # padding after EOS, as the search feeds finished rows
        state = c.update(state, tf.constant(tokens))
    return refused


def test_every_gold_tree_passes_its_search_constraint_and_broken_ones_do_not(generated):
    problem, data_dir, _ = generated
    brackets, examples = _brackets_and_copies(problem, data_dir)
    constraint = problem.search_constraint(data_dir)
    assert all(inputs[-1] == 1 for inputs, _ in examples)
    assert _feed_rows(constraint, examples) == [None] * len(examples)
    inputs, targets = examples[0]
    first_word = next(i for i, t in enumerate(targets) if t not in brackets)
    assert inputs[1] != inputs[0]
    skipped = targets[:first_word] + [inputs[1]] + targets[first_word + 1 :]
    assert _feed(constraint, inputs, skipped) == first_word  # the second piece first
    assert _feed_rows(constraint, examples[1:4] + [(inputs, skipped)]) == [None] * 3 + [first_word]
    close = next(i for i, t in enumerate(targets) if t in brackets and i > first_word)
    assert _feed(constraint, inputs, targets[:close] + [1]) == close  # EOS with brackets open


def test_placeholder_targets_pass_their_constraint_too(tmp_path, shared_data):
    from t2t_lite.problems.parsing import WsjParsing

    class PlaceholderParsing(WsjParsing):
        name = "wsj_parsing_placeholder"
        leaves = "placeholder"

    problem, data_dir = PlaceholderParsing(), str(tmp_path)
    problem.generate_data(data_dir, str(shared_data / "wsj_sample"), vocab_size=1000)
    assert problem.target_non_copy_ids(data_dir) is None  # XX is no copy of the input
    brackets, examples = _brackets_and_copies(problem, data_dir)
    encoder = problem.encoders(data_dir)["targets"]
    placeholder = encoder.pieces().index("\u2581XX")
    constraint = problem.search_constraint(data_dir)
    for inputs, targets in examples[:40]:
        words = len(encoder.decode(inputs).split())
        assert [t for t in targets if t not in brackets] == [placeholder] * words + [1]
    assert _feed_rows(constraint, examples[:40]) == [None] * 40
    inputs, targets = examples[0]
    assert _feed(constraint, inputs, targets[:-2] + [placeholder, *targets[-2:]]) is not None


def test_in_order_targets_read_back_as_the_gold_trees_and_pass_their_constraint(
    tmp_path, shared_data, sample
):
    import tensorflow as tf

    from t2t_lite import hparams
    from t2t_lite.models.build import build_transformer
    from t2t_lite.search import SearchConfig, Translator, pad_batch

    problem, data_dir = problems.get("wsj_parsing_in_order"), str(tmp_path)
    metadata = problem.generate_data(data_dir, str(shared_data / "wsj_sample"), vocab_size=1000)
    assert metadata["splits"]["train"]["examples"] == 3396
    encoder = problem.encoders(data_dir)["targets"]
    # The dev targets (in file order) are the gold trees in order: the words themselves,
    # each label after its constituent's first child; read back, they are the gold trees.
    examples = list(problem.examples("dev", data_dir).as_numpy_iterator())
    assert len(examples) == len(sample["dev"])
    for example, line in zip(examples, sample["dev"]):
        gold = trees.preprocess(trees.parse_tree(line))
        words, targets = encoder.decode(example["inputs"]), encoder.decode(example["targets"])
        assert targets.split() == trees.linearize(gold, leaves="word", order="in_order")
        assert problem.postprocess(targets, words, tags=trees.tags(gold)) == str(gold)
    # Their ids pass the problem's search constraint, the top-down ids of the same trees do
    # not (a tree begins with its first word there, not a bracket).
    brackets, copies = _brackets_and_copies(problem, data_dir)
    constraint = problem.search_constraint(data_dir)
    assert _feed_rows(constraint, copies) == [None] * len(copies)
    inputs, targets = copies[0]
    words = encoder.decode(inputs).split()
    in_order = trees.delinearize(encoder.decode(targets).split(), words, order="in_order")
    top_down_ids = encoder.encode(" ".join(trees.linearize(in_order, leaves="word")))
    assert _feed(constraint, inputs, top_down_ids) == 0
    # A search under the constraint, with an untrained model, gives in-order trees over the
    # words of each sentence: read back and written again, unchanged.
    hp = hparams.override(
        hparams.get("transformer_parsing_small"),
        "hidden_size=32,filter_size=64,num_heads=2,num_encoder_layers=1,num_decoder_layers=1",
    )
    model = build_transformer(
        hp, *problem.vocab_sizes(data_dir), non_copy_ids=problem.target_non_copy_ids(data_dir)
    )
    dev = [e["inputs"] for e in problem.examples("dev", data_dir).take(3).as_numpy_iterator()]
    config = SearchConfig(beam_size=2, alpha=0.3, extra_length=40)
    ids, _ = Translator(model, config, constraint=constraint).search(tf.constant(pad_batch(dev)))
    for row, inputs in zip(ids.numpy(), dev):
        words = encoder.decode(inputs).split()
        output = encoder.decode([t for t in row[0][1:] if t > 1]).split()
        tree = trees.delinearize(output, words, order="in_order")
        assert trees.words(tree) == words
        assert trees.linearize(tree, leaves="word", order="in_order") == output
