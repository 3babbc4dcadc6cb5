// The server's page: translate, list the n-best hypotheses, show attention and trees.
// It calls the model only through the REST API's :predict (signatures translate_nbest,
// attention and model_info), so it is batched and bounded like any other client, and it
// checks its requests as the server does before sending them. Model output is written as
// text (textContent), never as markup.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const state = { server: null, info: null, results: [], line: -1, rank: -1, attention: null };

  function say(text, isError) {
    $("message").textContent = text;
    $("message").classList.toggle("error", Boolean(isError));
  }

  function cell(tag, text, className) {
    const node = document.createElement(tag);
    node.textContent = text;
    if (className) node.className = className;
    return node;
  }

  async function predict(signature, inputs) {
    const body = JSON.stringify({ signature_name: signature, inputs });
    const bytes = new TextEncoder().encode(body).length;
    if (bytes > state.server.max_body_bytes) {
      throw new Error(`the request has ${bytes} bytes; this server takes at most ` +
        `${state.server.max_body_bytes}: send less text`);
    }
    const response = await fetch(`/v1/models/${encodeURIComponent(state.server.model)}:predict`, {
      method: "POST", headers: { "Content-Type": "application/json" }, body,
    });
    let answer;
    try {
      answer = await response.json();
    } catch (error) {
      throw new Error(`the server answered ${response.status} without JSON`);
    }
    if (!response.ok) throw new Error(answer.error || `the server answered ${response.status}`);
    return answer.outputs;
  }

  async function start() {
    try {
      const response = await fetch("/page/server.json");
      state.server = await response.json();
      state.info = await predict("model_info", {});
    } catch (error) {
      $("model-line").textContent = `The model cannot be described: ${error.message}`;
      return;
    }
    const info = state.info;
    $("model-line").textContent = `Model ${state.server.model}, problem ${info.problem}; ` +
      `beam sizes ${info.beam_sizes.join(", ")}; default beam ${info.beam_size}, ` +
      `alpha ${Number(info.alpha.toFixed(4))}.`;
    for (const size of info.beam_sizes) {
      const option = cell("option", String(size));
      option.value = String(size);
      option.selected = size === info.beam_size;
      $("beam-size").appendChild(option);
    }
    $("alpha").value = String(Number(info.alpha.toFixed(4)));
    $("alpha").max = String(info.alpha_max);
    $("translate").disabled = false;
    $("translate").addEventListener("click", translate);
    $("source").addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) translate();
    });
    $("layer").addEventListener("change", drawAttention);
    $("head").addEventListener("change", drawAttention);
  }

  // The request translate_nbest takes, or an Error saying what to change.
  function checkedRequest() {
    const sentences = $("source").value.split(/\r?\n/).filter((line) => line.trim() !== "");
    if (sentences.length === 0) throw new Error("type a sentence first");
    const rows = state.server.max_request_rows;
    if (sentences.length > rows) {
      throw new Error(`${sentences.length} sentences; this server takes at most ${rows} ` +
        "per request: translate fewer lines at a time");
    }
    const alphaText = $("alpha").value.trim();
    const alpha = Number(alphaText);
    if (alphaText === "" || !Number.isFinite(alpha) || alpha < 0 || alpha > state.info.alpha_max) {
      throw new Error(`alpha must be a number from 0 to ${state.info.alpha_max}`);
    }
    const beam = Number($("beam-size").value);
    if (!state.info.beam_sizes.includes(beam)) {
      throw new Error(`beam size must be one of ${state.info.beam_sizes.join(", ")}`);
    }
    return { sentences, beam_size: beam, alpha };
  }

  async function translate() {
    let request;
    try {
      request = checkedRequest();
    } catch (error) {
      say(error.message, true);
      return;
    }
    $("translate").disabled = true;
    say("Translating…");
    try {
      const out = await predict("translate_nbest", request);
      state.results = request.sentences.map((sentence, b) => ({
        sentence,
        hypotheses: out.translations[b].map((text, k) => ({
          text, score: out.scores[b][k], length: out.lengths[b][k], filled: out.filled[b][k],
        })),
      }));
      say(`Translated ${request.sentences.length} sentence(s) with beam ${request.beam_size}, ` +
        `alpha ${request.alpha}.`);
      showResults();
      selectLine(0);
    } catch (error) {
      say(error.message, true);
    } finally {
      $("translate").disabled = false;
    }
  }

  function showResults() {
    const list = $("results");
    list.replaceChildren();
    state.results.forEach((result, b) => {
      const item = document.createElement("li");
      const button = document.createElement("button");
      button.type = "button";
      button.className = "result";
      button.dataset.line = String(b);
      button.appendChild(cell("span", result.sentence, "source-text"));
      button.appendChild(cell("span", result.hypotheses[0].text, "translation"));
      button.addEventListener("click", () => selectLine(b));
      item.appendChild(button);
      list.appendChild(item);
    });
    $("results-section").hidden = false;
  }

  function selectLine(b) {
    state.line = b;
    document.querySelectorAll("#results .result").forEach((node) =>
      node.classList.toggle("selected", Number(node.dataset.line) === b));
    const body = $("nbest").tBodies[0];
    body.replaceChildren();
    state.results[b].hypotheses.forEach((hypothesis, k) => {
      const row = document.createElement("tr");
      row.dataset.rank = String(k);
      row.dataset.score = String(hypothesis.score);
      row.appendChild(cell("td", String(k + 1), "rank"));
      if (hypothesis.filled) {
        row.appendChild(cell("td", hypothesis.text, "hypothesis"));
        row.appendChild(cell("td", hypothesis.score.toFixed(4), "score"));
        row.appendChild(cell("td", String(hypothesis.length), "length"));
        row.tabIndex = 0;
        row.addEventListener("click", () => selectHypothesis(k));
        row.addEventListener("keydown", (event) => {
          if (event.key === "Enter" || event.key === " ") selectHypothesis(k);
        });
      } else {
        row.className = "empty";
        const note = cell("td", "no hypothesis reached this beam slot", "hypothesis");
        note.colSpan = 3;
        row.appendChild(note);
      }
      body.appendChild(row);
    });
    $("nbest-section").hidden = false;
    selectHypothesis(0);
  }

  async function selectHypothesis(k) {
    state.rank = k;
    const result = state.results[state.line];
    const hypothesis = result.hypotheses[k];
    document.querySelectorAll("#nbest tbody tr").forEach((row) =>
      row.classList.toggle("selected", Number(row.dataset.rank) === k));
    if (state.info.output_format === "linearized_tree") {
      const problems = T2TDraw.tree($("tree"), hypothesis.text);
      $("tree-note").textContent = `Rank ${k + 1}` +
        (problems.length ? `; not a well-formed tree: ${problems.join("; ")}` : ".");
      $("tree-section").hidden = false;
    }
    const asked = { line: state.line, rank: k };
    try {
      const out = await predict("attention", {
        sentences: [result.sentence], targets: [hypothesis.text],
      });
      if (asked.line !== state.line || asked.rank !== state.rank) return; // superseded
      showAttention(out);
    } catch (error) {
      say(`attention: ${error.message}`, true);
    }
  }

  function showAttention(out) {
    const S = out.source_lengths[0];
    const T = out.target_lengths[0];
    const maps = out.attention[0].map((layer) =>
      layer.map((head) => head.slice(0, T).map((row) => row.slice(0, S))));
    state.attention = {
      source: out.source_pieces[0].slice(0, S), target: out.target_pieces[0].slice(0, T), maps,
    };
    fillSelect($("layer"), maps.length, "layer");
    fillSelect($("head"), maps[0].length, "head");
    $("attention-section").hidden = false;
    drawAttention();
  }

  function fillSelect(select, count, name) {
    const kept = select.value;
    select.replaceChildren(cell("option", `average of ${name}s`));
    select.firstChild.value = "average";
    for (let i = 0; i < count; i += 1) {
      const option = cell("option", `${name} ${i + 1}`);
      option.value = String(i);
      select.appendChild(option);
    }
    select.value = Array.from(select.options).some((o) => o.value === kept) ? kept : "average";
  }

  function mean(matrices) {
    return matrices[0].map((row, r) =>
      row.map((_, c) => matrices.reduce((sum, m) => sum + m[r][c], 0) / matrices.length));
  }

  function drawAttention() {
    const { source, target, maps } = state.attention;
    const layer = $("layer").value;
    const head = $("head").value;
    const layers = layer === "average" ? maps : [maps[Number(layer)]];
    const perLayer = layers.map((heads) => (head === "average" ? mean(heads) : heads[Number(head)]));
    const matrix = perLayer.length === 1 ? perLayer[0] : mean(perLayer);
    const caption = `encoder-decoder attention, ${$("layer").selectedOptions[0].textContent}, ` +
      `${$("head").selectedOptions[0].textContent}`;
    T2TDraw.heatmap($("heatmap"), target, source, matrix, caption);
  }

  document.addEventListener("DOMContentLoaded", start);
})();
