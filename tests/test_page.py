"""The server's web page in a real browser: headless Chromium driven by Selenium.

Two real `python -m t2t_lite.serve` processes serve tiny trained models: the serving tests'
algorithmic_reverse model (`serving_support.exported_model`) and a wsj_parsing model trained
for a few steps on the WSJ sample. The page is checked against independent sources: the
REST API's own signatures (`translate_with_options`, `translate_ids_with_options`,
`attention`) and the model's attention computed in this process by
`t2t_lite.models.attention_maps` on the same checkpoint. Model text holding HTML must
show as text, never become elements. Screenshots go to the test's folder (and, with
T2T_PAGE_SCREENSHOTS=DIR, to DIR: how docs/images/ is made).
"""

import http.client
import json
import os
from urllib.parse import urlparse

import matplotlib.image
import numpy as np
import pytest
from conftest import load_tool
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait
from serving_support import _ready, _start, _stop, call, exported_model, predict

from t2t_lite import hparams, problems
from t2t_lite.export import export_from_run
from t2t_lite.ids import EOS_ID
from t2t_lite.models import attention_maps
from t2t_lite.runs import load_trained_model
from t2t_lite.training import trainer

pytestmark = pytest.mark.slow

MAX_ROWS = 3  # the reverse server's --max_request_rows
PARSER_TINY = (
    "hidden_size=32,filter_size=64,num_heads=2,num_encoder_layers=1,num_decoder_layers=1,"
    "batch_size=1024,warmup_steps=100,dropout=0.0,attention_dropout=0.0,relu_dropout=0.0"
)
PARSER_STEPS = 30
# Words a parse copies to its leaves: markup, entities and a script-looking word.
HOSTILE_WORDS = ["The", "<b>", "firm", "said", "AT&T", "&amp;", "<img/src/onerror=pwn()>", "."]
page_screenshot = load_tool("page_screenshot")


def _serve(model_dir, name, log, *flags):
    """A server process on `model_dir`; returns (process, base URL)."""
    process, lines = _start(model_dir, log, *flags)
    try:
        return process, _ready(process, lines, name=name)
    except BaseException:  # a server that never became ready must not outlive the test
        _stop(process)
        raise


@pytest.fixture(scope="module")
def reverse(tmp_path_factory):
    """The reverse model's server: {"url", "model_dir", "run_dir"}."""
    model_dir = exported_model(tmp_path_factory)
    log = tmp_path_factory.mktemp("page_logs") / "reverse.log"
    process, url = _serve(model_dir, "rev", log, f"--max_request_rows={MAX_ROWS}")
    try:
        yield {"url": url, "model_dir": model_dir, "run_dir": model_dir.parent.parent / "run"}
    finally:
        _stop(process)


@pytest.fixture(scope="module")
def parser(tmp_path_factory, shared_data):
    """A tiny wsj_parsing model (beams 1 and 2, input + 40) and its server: {"url"}."""
    work = tmp_path_factory.mktemp("page_parser")
    data_dir, run_dir = str(work / "data"), str(work / "run")
    problems.get("wsj_parsing").generate_data(
        data_dir, str(shared_data / "wsj_sample"), vocab_size=1000
    )
    config = trainer.RunConfig(
        problem="wsj_parsing", output_dir=run_dir, data_dir=data_dir, train_steps=PARSER_STEPS,
        eval_steps=1, eval_every=PARSER_STEPS, save_every=PARSER_STEPS, log_every=PARSER_STEPS,
    )  # fmt: skip
    hp = hparams.override(hparams.get("transformer_parsing_small"), PARSER_TINY)
    trainer.train_and_evaluate(config, hp, printer=lambda line: None)
    export_from_run(
        "wsj_parsing", data_dir, run_dir, str(work / "export"), "parser", beam_size=2,
        extra_length=40, ids_model_name="",
    )  # fmt: skip
    process, url = _serve(work / "export" / "parser", "parser", work / "parser.log")
    try:
        yield {"url": url}
    finally:
        _stop(process)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Headless Chromium (Debian's chromium and chromium-driver) with a fresh profile."""
    try:
        session = page_screenshot.start_chromium(str(tmp_path_factory.mktemp("chromium_profile")))
    except RuntimeError as error:
        pytest.fail(f"the page's tests need a browser: {error} (.ci/run does this)")
    try:
        yield session
    finally:
        session.quit()


def _screenshot(browser, name, tmp_path):
    browser.save_screenshot(str(tmp_path / name))
    folder = os.environ.get("T2T_PAGE_SCREENSHOTS")
    if folder:
        browser.save_screenshot(os.path.join(folder, name))


def _open(browser, url):
    page_screenshot.open_page(browser, url)


def _translate(browser, text, beam=None, alpha=None):
    """Types `text`, sets the options, clicks Translate and waits for the heat map."""
    page_screenshot.translate(browser, text, beam, alpha)


def _heatmap(browser) -> dict:
    """What the page drew: row and column labels and the [T, S] values of its cells."""
    return browser.execute_script(
        """
        const texts = (selector) => Array.from(document.querySelectorAll(selector))
            .map((node) => node.firstChild.textContent);
        const cells = Array.from(document.querySelectorAll('#heatmap rect.cell'))
            .map((c) => [Number(c.dataset.row), Number(c.dataset.col), Number(c.dataset.value)]);
        return {rows: texts('#heatmap .row-label'), columns: texts('#heatmap .column-label'),
                cells};
        """
    )


def _matrix(drawn) -> np.ndarray:
    matrix = np.full((len(drawn["rows"]), len(drawn["columns"])), np.nan)
    for row, column, value in drawn["cells"]:
        matrix[row, column] = value
    return matrix


def _rest_attention(url, sentence, target, model):
    status, body = predict(
        url,
        {"signature_name": "attention", "inputs": {"sentences": [sentence], "targets": [target]}},
        model,
    )
    assert status == 200, body
    out = body["outputs"]
    s, t = out["source_lengths"][0], out["target_lengths"][0]
    attention = np.array(out["attention"][0])[:, :, :t, :s]  # [layers, H, T, S]
    return out["source_pieces"][0][:s], out["target_pieces"][0][:t], attention


def _get(url, path):
    """GET `path`: (status, headers, body bytes)."""
    parsed = urlparse(url)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=60)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def test_page_files_are_served_with_a_strict_policy(reverse):
    status, headers, body = _get(reverse["url"], "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert b'<script src="/page/page.js"' in body
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert headers["X-Content-Type-Options"] == "nosniff"
    status, headers, body = _get(reverse["url"], "/page/server.json")
    assert json.loads(body) == {
        "model": "rev",
        "max_request_rows": MAX_ROWS,
        "max_body_bytes": 4 << 20,
    }
    # Anything else is still the REST API's: a JSON 404 naming the path.
    assert call(reverse["url"], "GET", "/page/../setup.py")[0] == 404


def test_translation_nbest_and_attention_match_the_model(reverse, browser, tmp_path):
    url, sentence, beam, alpha = reverse["url"], "3 1 4 1 5", 2, 0.8
    _open(browser, url)
    offered = [
        o.get_attribute("value") for o in Select(browser.find_element(By.ID, "beam-size")).options
    ]
    assert offered == ["1", "2"]  # the export's beam sizes, from model_info
    _translate(browser, sentence, beam, alpha)

    # The translation is the REST API's.
    status, body = predict(url, {"signature_name": "translate_with_options", "inputs": {
        "sentences": [sentence], "beam_size": beam, "alpha": alpha}})  # fmt: skip
    assert status == 200, body
    shown = browser.find_element(By.CSS_SELECTOR, "#results .translation").text
    assert shown == body["outputs"]["translations"][0]

    # The n-best list: translate_ids_with_options's scores, its hypotheses and their lengths.
    encoder = problems.get("algorithmic_reverse").encoders("")["inputs"]
    status, body = predict(url, {"signature_name": "translate_ids_with_options", "inputs": {
        "input_ids": [encoder.encode(sentence) + [EOS_ID]], "beam_size": beam, "alpha": alpha}})  # fmt: skip
    assert status == 200, body
    rows = browser.find_elements(By.CSS_SELECTOR, "#nbest tbody tr")
    assert len(rows) == beam
    scores = [float(row.get_attribute("data-score")) for row in rows]
    np.testing.assert_allclose(scores, body["outputs"]["scores"][0], rtol=1e-6)
    for row, ids in zip(rows, body["outputs"]["output_ids"][0]):
        kept = ids[: ids.index(EOS_ID)] if EOS_ID in ids else [i for i in ids if i]
        assert row.find_element(By.CSS_SELECTOR, ".hypothesis").text == encoder.decode(kept)
        assert row.find_element(By.CSS_SELECTOR, ".length").text == str(len(kept))

    # The heat map: the attention signature's values, which are the model's own.
    hypothesis = rows[0].find_element(By.CSS_SELECTOR, ".hypothesis").text
    source_pieces, target_pieces, attention = _rest_attention(url, sentence, hypothesis, "rev")
    trained = load_trained_model("algorithmic_reverse", "", str(reverse["run_dir"]))
    direct = attention_maps.sentence_attention(
        trained.model, encoder.encode(sentence), encoder.encode(hypothesis)
    )
    np.testing.assert_allclose(
        attention, np.stack(direct.maps[attention_maps.ENCODER_DECODER]), atol=2e-6
    )
    assert source_pieces == attention_maps.token_labels(encoder, direct.source_ids)
    assert target_pieces == attention_maps.token_labels(encoder, direct.target_ids)
    drawn = _heatmap(browser)  # average of layers and heads, the default
    assert drawn["rows"] == target_pieces and drawn["columns"] == source_pieces
    assert len(drawn["cells"]) == len(target_pieces) * len(source_pieces)
    np.testing.assert_allclose(_matrix(drawn), attention.mean(axis=(0, 1)), atol=1e-6)
    Select(browser.find_element(By.ID, "layer")).select_by_value("1")
    Select(browser.find_element(By.ID, "head")).select_by_value("0")
    np.testing.assert_allclose(_matrix(_heatmap(browser)), attention[1, 0], atol=1e-7)

    # Hovering target piece r highlights each source piece by its share of row r's peak.
    r = 2
    label = browser.find_elements(By.CSS_SELECTOR, "#heatmap .row-label")[r]
    ActionChains(browser).move_to_element(label).perform()
    opacities = [
        float(node.get_attribute("fill-opacity"))
        for node in browser.find_elements(By.CSS_SELECTOR, "#heatmap .column-highlight")
    ]
    np.testing.assert_allclose(opacities, attention[1, 0, r] / attention[1, 0, r].max(), atol=1e-3)
    assert "focused" in label.get_attribute("class")
    _screenshot(browser, "page_translation.png", tmp_path)


def test_screenshot_tool_translates_and_writes_the_window(reverse, tmp_path):
    out = tmp_path / "page.png"
    argv = ["--url", reverse["url"], "--out", str(out), "--text", "3 5 7 9", "--width", "800",
            "--height", "600", "--beam_size", "2"]  # fmt: skip
    assert page_screenshot.main(argv) == 0
    pixels = matplotlib.image.imread(out)
    assert pixels.shape[1] == 800  # the window's width; its height includes what is not page
    assert pixels.std() > 0  # something was drawn
    # A request the page refuses is the page's message and a failing exit, not a picture.
    refused = tmp_path / "refused.png"
    assert (
        page_screenshot.main(["--url", reverse["url"], "--out", str(refused), "--alpha", "10.5"])
        == 1
    )
    assert not refused.exists()


def test_page_checks_requests_as_the_api_does(reverse, browser):
    url = reverse["url"]
    _open(browser, url)
    requests = call(url, "GET", "/healthz")[1]["batching"]["requests"]

    def refused(text, alpha="0.6"):
        browser.find_element(By.ID, "source").clear()
        browser.find_element(By.ID, "source").send_keys(text)
        browser.find_element(By.ID, "alpha").clear()
        browser.find_element(By.ID, "alpha").send_keys(alpha)
        browser.find_element(By.ID, "translate").click()
        message = browser.find_element(By.CSS_SELECTOR, "#message.error").text
        return message

    assert refused("1 2", alpha="10.5") == "alpha must be a number from 0 to 10"
    assert refused("  \n ") == "type a sentence first"
    lines = "\n".join(["1 2"] * (MAX_ROWS + 1))
    assert refused(lines).startswith(
        f"{MAX_ROWS + 1} sentences; this server takes at most {MAX_ROWS}"
    )
    # None of them reached the model; the API refuses the same requests.
    assert call(url, "GET", "/healthz")[1]["batching"]["requests"] == requests
    too_many = {"signature_name": "translate_nbest", "inputs": {
        "sentences": ["1 2"] * (MAX_ROWS + 1), "beam_size": 1, "alpha": 0.6}}  # fmt: skip
    assert predict(url, too_many)[0] == 413
    too_much_alpha = {"signature_name": "translate_nbest", "inputs": {
        "sentences": ["1 2"], "beam_size": 1, "alpha": 10.5}}  # fmt: skip
    assert predict(url, too_much_alpha)[0] == 400
    # What only the model can check comes back from the API, shown as the page got it.
    browser.find_element(By.ID, "source").clear()
    browser.find_element(By.ID, "source").send_keys("1 99999")
    browser.find_element(By.ID, "translate").click()
    message = (
        WebDriverWait(browser, 120)
        .until(lambda b: b.find_elements(By.CSS_SELECTOR, "#message.error"))[0]
        .text
    )
    assert "symbols must be below" in message, message


def test_parse_trees_are_drawn_and_model_text_stays_text(parser, browser, tmp_path):
    url, sentence = parser["url"], " ".join(HOSTILE_WORDS)
    _open(browser, url)
    _translate(browser, sentence)
    status, body = predict(url, {"signature_name": "translate_nbest", "inputs": {
        "sentences": [sentence], "beam_size": 2, "alpha": 0.3}}, model="parser")  # fmt: skip
    assert status == 200, body
    best = body["outputs"]["translations"][0][0]
    tokens = best.split()
    # The tree: one node per bracket of the best parse, its words as leaves, in order.
    constituents = browser.find_elements(By.CSS_SELECTOR, "#tree svg g.constituent text")
    assert [node.text for node in constituents] == [t[1:] for t in tokens if t[0] == "("]
    leaves = browser.find_elements(By.CSS_SELECTOR, "#tree svg g.leaf text")
    words = [t for t in tokens if t[0] not in "()"]
    assert [node.get_attribute("textContent") for node in leaves] == words == HOSTILE_WORDS
    edges = browser.find_elements(By.CSS_SELECTOR, "#tree svg .edges line")
    roots = sum(1 for node in constituents) - len(edges) + len(leaves)
    assert roots >= 1
    # Model text with markup is shown as written and never becomes elements.
    translation = browser.find_element(By.CSS_SELECTOR, "#results .translation")
    assert translation.get_attribute("textContent") == best
    assert (
        browser.find_element(By.CSS_SELECTOR, "#nbest .hypothesis").get_attribute("textContent")
        == best
    )
    source_pieces, _, _ = _rest_attention(url, sentence, best, "parser")
    assert _heatmap(browser)["columns"] == [
        p[:23] + "…" if len(p) > 24 else p for p in source_pieces
    ]
    made = browser.execute_script(
        "return document.querySelectorAll('main b, main img, main script, main a').length"
    )
    assert made == 0
    assert browser.execute_script("return typeof window.pwn") == "undefined"
    browser.execute_script("document.getElementById('nbest-section').scrollIntoView()")
    _screenshot(browser, "page_parse_tree.png", tmp_path)
