"""Attention probabilities of one sentence pair, and pictures of them (the paper's Figures 3-5).

`sentence_attention(model, source_ids, target_ids)` runs the model once over a source and a
target (the model's own translation, or any other), teacher-forced and in eval mode, and
keeps what each attention sub-layer computed: softmax(Q K^T / sqrt(Dh)) over the keys the
mask allows (eq. 1), per layer and per head, as [H, query, key] arrays. They come from the
layers' own `return_attention` path, so they are the probabilities the model multiplies the
values with; masked keys (padding, the future) get exactly 0.

Axes. Encoder self-attention is [H, S, S] over the source pieces (EOS included).
Decoder rows are target positions: row t is the position that predicts target piece t (EOS
included), whose query is the piece before it (`<s>`, the start id 0, for the first). So
encoder-decoder attention is [H, T, S] (target piece predicted x source piece), and decoder
self-attention [H, T, T] has as keys the decoder's inputs: `<s>`, then target pieces 1..T-1.
Row t may see keys 0..t: the causal mask zeroes the upper triangle.

Pictures. `layer_figure` draws one attention kind of one layer: a panel averaging the heads,
then a panel per head, one colour scale (0 to 1) and bar for all. `summary_figures` draws the
trainer's TensorBoard images (encoder-decoder attention averaged over heads). Drawing sits
here, beside the probabilities, because the trainer (TensorBoard at every evaluation) and the
`t2t_lite.attention` command (PNG files) draw the same pictures and this is the part both may
import. matplotlib is imported only inside the drawing functions, so models stay importable
without it, and figures are drawn on its Agg canvas directly: no pyplot, no global backend.
"""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np
from keras import ops

from t2t_lite.ids import EOS_ID, PAD_ID
from t2t_lite.models.transformer import shift_targets_right

ENCODER = "encoder"
DECODER = "decoder"
ENCODER_DECODER = "encoder_decoder"
KINDS = (ENCODER, DECODER, ENCODER_DECODER)
TITLES = {
    ENCODER: "encoder self-attention",
    DECODER: "decoder self-attention",
    ENCODER_DECODER: "encoder-decoder attention",
}
START_LABEL = "<s>"
EOS_LABEL = "</s>"
PAD_LABEL = "<pad>"

# Figure geometry, in inches at DPI dots per inch: a cell per token pair, room for the tick
# labels (up to LABEL_CHARACTERS characters of FONT_SIZE points each), titles and the bar.
DPI = 100
FONT_SIZE = 8
CELL = 0.2
MIN_PANEL = 1.6
CHARACTER_WIDTH = 0.075
LABEL_CHARACTERS = 24
PANEL_GAP = 0.3
PANEL_TITLE = 0.3
AXIS_NAME = 0.3
COLOUR_BAR = 1.0
FIGURE_TITLE = 0.5
# The largest picture drawn, in pixels: matplotlib needs about 9 bytes per pixel while it
# draws and writes one, so this keeps a figure near 350 MB (a cell per token pair grows
# with the square of the sentence: 967 pieces a side would take tens of gigabytes).
MAX_PIXELS = 40_000_000


@dataclasses.dataclass
class SentenceAttention:
    """The attention probabilities of one sentence pair.

    Attributes:
        source_ids: the S source ids the model read, EOS included.
        target_ids: the T target ids it predicted, EOS included.
        maps: {kind: one float32 array per layer}: ENCODER [H, S, S], DECODER [H, T, T],
            ENCODER_DECODER [H, T, S].
    """

    source_ids: list
    target_ids: list
    maps: dict

    @property
    def num_layers(self) -> dict:
        return {kind: len(layers) for kind, layers in self.maps.items()}


def attention_probabilities(model, inputs, targets) -> dict:
    """Every attention sub-layer's probabilities for a batch, teacher-forced, in eval mode.

    Args:
        model: a built `Transformer`.
        inputs: int [B, S] source ids, EOS-terminated, 0-padded.
        targets: int [B, T] target ids, EOS-terminated, 0-padded; the decoder reads them
            shifted right, as in training.

    Returns:
        {ENCODER: [B, H, S, S] per encoder layer, DECODER: [B, H, T, T] and
        ENCODER_DECODER: [B, H, T, S] per decoder layer}, float32 numpy arrays.
    """
    inputs = ops.convert_to_tensor(np.asarray(inputs, np.int32))
    targets = ops.convert_to_tensor(np.asarray(targets, np.int32))
    encoder_output, encoder_mask, encoder = model.encode(
        inputs, training=False, return_attention=True
    )
    _, decoder = model.decode(
        shift_targets_right(targets), encoder_output, encoder_mask, training=False,
        return_attention=True,
    )  # fmt: skip

    def numpy(probabilities):
        return ops.convert_to_numpy(ops.cast(probabilities, "float32"))

    return {
        ENCODER: [numpy(layer) for layer in encoder],
        DECODER: [numpy(layer["self_attention"]) for layer in decoder],
        ENCODER_DECODER: [numpy(layer["cross_attention"]) for layer in decoder],
    }


def sentence_attention(model, source_ids, target_ids) -> SentenceAttention:
    """The probabilities of one pair: token ids without EOS (it is appended here)."""
    source = [int(i) for i in source_ids] + [EOS_ID]
    target = [int(i) for i in target_ids] + [EOS_ID]
    batch = attention_probabilities(model, [source], [target])
    maps = {kind: [layer[0] for layer in layers] for kind, layers in batch.items()}
    return SentenceAttention(source_ids=source, target_ids=target, maps=maps)


def token_labels(encoder, ids) -> list:
    """What to write for each id: its subword piece (`▁the`), `</s>` for EOS.

    Args:
        encoder: the problem's `TextEncoder`; its `pieces()` when it has them (a
            SentencePiece vocabulary), else `decode([id])`.
        ids: token ids.
    """
    pieces = encoder.pieces() if hasattr(encoder, "pieces") else None
    labels = []
    for token_id in (int(i) for i in ids):
        if token_id == EOS_ID:
            labels.append(EOS_LABEL)
        elif token_id == PAD_ID:
            labels.append(PAD_LABEL)
        else:
            labels.append(pieces[token_id] if pieces else encoder.decode([token_id]))
    return labels


def axis_labels(kind: str, source_labels: list, target_labels: list) -> tuple:
    """(row labels, column labels, row name, column name) of a map of `kind`."""
    if kind == ENCODER:
        return source_labels, source_labels, "source (query)", "source (key)"
    if kind == ENCODER_DECODER:
        return target_labels, source_labels, "target (predicted)", "source (key)"
    decoder_inputs = [START_LABEL, *target_labels[:-1]]
    return target_labels, decoder_inputs, "target (predicted)", "decoder input (key)"


def layer_figure(
    attention: SentenceAttention,
    kind: str,
    layer: int,
    source_labels: list,
    target_labels: list,
    dpi: int = DPI,
):
    """One kind of attention of one layer (0-based): the heads' average, then each head.

    Returns:
        a matplotlib Figure; panel i's image holds the array drawn (`axes[i].images[0]`).
    """
    probabilities = attention.maps[kind][layer]  # [H, Tq, Tk]
    panels = [("average of heads", probabilities.mean(axis=0))]
    panels += [(f"head {h + 1}", matrix) for h, matrix in enumerate(probabilities)]
    title = f"{TITLES[kind]}, layer {layer + 1} of {len(attention.maps[kind])}"
    return draw_panels(panels, *axis_labels(kind, source_labels, target_labels), title, dpi)


def summary_figures(
    attention: SentenceAttention, source_labels: list, target_labels: list, dpi: int = DPI
) -> dict:
    """The trainer's TensorBoard pictures: encoder-decoder attention averaged over heads.

    Returns:
        {"encoder_decoder_last_layer": the last layer, "encoder_decoder_layers": a panel
        per layer}, matplotlib Figures.
    """
    layers = [layer.mean(axis=0) for layer in attention.maps[ENCODER_DECODER]]  # [T, S] each
    labels = axis_labels(ENCODER_DECODER, source_labels, target_labels)
    count = len(layers)
    return {
        "encoder_decoder_last_layer": draw_panels(
            [("average of heads", layers[-1])],
            *labels,
            f"{TITLES[ENCODER_DECODER]}, layer {count} of {count}",
            dpi,
        ),
        "encoder_decoder_layers": draw_panels(
            [(f"layer {n + 1}", matrix) for n, matrix in enumerate(layers)],
            *labels,
            f"{TITLES[ENCODER_DECODER]}, average of heads per layer",
            dpi,
        ),
    }


def grid(count: int) -> tuple:
    """(rows, columns) of the most square grid holding `count` panels."""
    columns = math.ceil(math.sqrt(count))
    return math.ceil(count / columns), columns


def figure_size(count: int, row_labels: list, column_labels: list) -> tuple:
    """(width, height) in inches of `count` panels of len(row_labels) x len(column_labels).

    Multiples of 0.1 inch, so that the picture is exactly (width, height) x dpi pixels.
    """
    rows, columns = grid(count)
    panel_width = max(MIN_PANEL, CELL * len(column_labels))
    panel_height = max(MIN_PANEL, CELL * len(row_labels))
    left = CHARACTER_WIDTH * _longest(row_labels) + AXIS_NAME
    bottom = CHARACTER_WIDTH * _longest(column_labels) + AXIS_NAME
    width = left + columns * panel_width + (columns - 1) * PANEL_GAP + COLOUR_BAR
    height = FIGURE_TITLE + rows * (panel_height + PANEL_TITLE) + (rows - 1) * PANEL_GAP + bottom
    return math.ceil(width * 10) / 10, math.ceil(height * 10) / 10


def check_drawable(
    kind: str, source_labels: list, target_labels: list, heads: int, dpi: int = DPI
) -> None:
    """Refuses a `layer_figure` of more than MAX_PIXELS pixels, before anything is drawn.

    Raises:
        ValueError: naming the picture's size and about the longest sentence that fits.
    """
    if _pixels(kind, source_labels, target_labels, heads, dpi) <= MAX_PIXELS:
        return
    rows, columns, _, _ = axis_labels(kind, source_labels, target_labels)
    width, height = figure_size(heads + 1, rows, columns)
    # The side to shorten: the only one drawn, or the longer one.
    target = kind == DECODER or (
        kind == ENCODER_DECODER and len(target_labels) > len(source_labels)
    )
    labels = target_labels if target else source_labels
    fits = None
    for n in range(len(labels) - 1, 1, -1):  # n labels: n - 1 pieces and EOS
        shorter = labels[: n - 1] + labels[-1:]
        sides = (source_labels, shorter) if target else (shorter, target_labels)
        if _pixels(kind, *sides, heads, dpi) <= MAX_PIXELS:
            fits = n - 1
            break
    side = "target" if target else "source"
    hint = f"give a {side} of at most {fits} pieces (and EOS), or " if fits else ""
    raise ValueError(
        f"the {TITLES[kind]} picture would be {round(width * dpi):,} x {round(height * dpi):,} "
        f"pixels ({len(rows)} x {len(columns)} pieces, {heads + 1} panels, --dpi={dpi}), more "
        f"than the {MAX_PIXELS:,} this command draws; {hint}lower --dpi"
    )


def _pixels(kind: str, source_labels: list, target_labels: list, heads: int, dpi: int) -> float:
    rows, columns, _, _ = axis_labels(kind, source_labels, target_labels)
    width, height = figure_size(heads + 1, rows, columns)
    return width * dpi * height * dpi


def _longest(labels: list) -> int:
    return min(max((len(label) for label in labels), default=1), LABEL_CHARACTERS)


def draw_panels(
    panels: list,
    row_labels: list,
    column_labels: list,
    row_name: str,
    column_name: str,
    title: str,
    dpi: int = DPI,
):
    """Heat maps sharing axes, one colour scale from 0 to 1 and a colour bar.

    Args:
        panels: (title, [Tq, Tk] array) of each panel.
        row_labels, column_labels: Tq and Tk tick labels (cut to LABEL_CHARACTERS).
        row_name, column_name: the axes' names.
        title: the figure's title.
        dpi: dots per inch of the figure (and of its PNG).

    Returns:
        a matplotlib Figure of `figure_size(...)` inches on an Agg canvas.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows, columns = grid(len(panels))
    figure = Figure(
        figsize=figure_size(len(panels), row_labels, column_labels), dpi=dpi, layout="constrained"
    )
    FigureCanvasAgg(figure)
    axes = figure.subplots(rows, columns, squeeze=False)
    image = None
    for index, ax in enumerate(axes.flat):
        if index >= len(panels):
            ax.set_axis_off()
            continue
        name, matrix = panels[index]
        image = ax.imshow(
            matrix, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto", interpolation="nearest"
        )
        ax.set_title(name, fontsize=FONT_SIZE + 1)
        # Tick labels on the outer panels only: left column, and the lowest panel of a column.
        left, lowest = index % columns == 0, index + columns >= len(panels)
        ax.set_yticks(range(len(row_labels)), _cut(row_labels) if left else [])
        ax.set_xticks(range(len(column_labels)), _cut(column_labels) if lowest else [])
        ax.tick_params(axis="x", labelrotation=90, labelsize=FONT_SIZE)
        ax.tick_params(axis="y", labelsize=FONT_SIZE)
        if left:
            ax.set_ylabel(row_name, fontsize=FONT_SIZE + 1)
        if lowest:
            ax.set_xlabel(column_name, fontsize=FONT_SIZE + 1)
    figure.colorbar(image, ax=axes, shrink=0.9, label="attention probability")
    figure.suptitle(title, fontsize=FONT_SIZE + 3)
    return figure


def _cut(labels: list) -> list:
    return [
        label if len(label) <= LABEL_CHARACTERS else label[: LABEL_CHARACTERS - 1] + "…"
        for label in labels
    ]


def figure_pixels(figure) -> np.ndarray:
    """The figure rendered: uint8 [height, width, 3] RGB (what TensorBoard shows)."""
    figure.canvas.draw()
    return np.asarray(figure.canvas.buffer_rgba())[:, :, :3].copy()


def write_figures(
    attention: SentenceAttention,
    source_labels: list,
    target_labels: list,
    image_dir: str,
    dpi: int = DPI,
) -> list:
    """Writes one PNG per kind and layer, and the arrays drawn; returns the paths written.

    Files: `<kind>_layer<n>.png` (n from 1) and `attention.npz`, which holds each
    `<kind>_layer<n>` array [H, Tq, Tk] and the labels `source_labels`, `target_labels`.
    """
    os.makedirs(image_dir, exist_ok=True)
    written, arrays = [], {}
    for kind in KINDS:
        for layer, probabilities in enumerate(attention.maps[kind]):
            name = f"{kind}_layer{layer + 1}"
            figure = layer_figure(attention, kind, layer, source_labels, target_labels, dpi)
            path = os.path.join(image_dir, f"{name}.png")
            figure.savefig(path, dpi=dpi)
            written.append(path)
            arrays[name] = probabilities
    path = os.path.join(image_dir, "attention.npz")
    np.savez(
        path, source_labels=np.array(source_labels), target_labels=np.array(target_labels),
        **arrays,
    )  # fmt: skip
    written.append(path)
    return written
