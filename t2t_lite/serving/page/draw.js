// Drawing for the server's page: attention heat maps and bracketed trees as SVG.
// Every label is model output: it is only ever set as a text node (textContent) of an
// element made with createElementNS, never parsed as markup.
"use strict";

const T2TDraw = (() => {
  const SVG = "http://www.w3.org/2000/svg";
  const CELL = 22; // px per heat-map cell
  const CHAR = 7.2; // px per label character (the page's 12px monospace)
  const LABEL_CHARS = 24; // longer labels are cut, with the whole label in a tooltip
  // Viridis at five stops: dark blue (0) to yellow (1), as the attention PNGs use.
  const STOPS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];

  function el(name, attributes, text) {
    const node = document.createElementNS(SVG, name);
    for (const [key, value] of Object.entries(attributes || {})) {
      node.setAttribute(key, String(value));
    }
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function colour(value) {
    const v = Math.min(1, Math.max(0, Number(value) || 0)) * (STOPS.length - 1);
    const i = Math.min(STOPS.length - 2, Math.floor(v));
    const f = v - i;
    const rgb = STOPS[i].map((c, k) => Math.round(c + f * (STOPS[i + 1][k] - c)));
    return `rgb(${rgb[0]},${rgb[1]},${rgb[2]})`;
  }

  function cut(label) {
    return label.length <= LABEL_CHARS ? label : label.slice(0, LABEL_CHARS - 1) + "…";
  }

  function longest(labels) {
    return Math.min(LABEL_CHARS, Math.max(1, ...labels.map((l) => l.length)));
  }

  // matrix: T rows (target pieces) of S values (source pieces), probabilities in [0, 1].
  function heatmap(container, rowLabels, columnLabels, matrix, caption) {
    container.replaceChildren();
    const left = longest(rowLabels) * CHAR + 14;
    const top = longest(columnLabels) * CHAR + 14;
    const width = left + columnLabels.length * CELL + 90;
    const height = Math.max(top + rowLabels.length * CELL + 10, top + 130);
    const svg = el("svg", {
      width, height, viewBox: `0 0 ${width} ${height}`, class: "heatmap", role: "img",
    });
    svg.appendChild(el("title", {}, caption));
    const highlights = columnLabels.map((_, c) => el("rect", {
      class: "column-highlight", x: left + c * CELL, y: 0, width: CELL, height: top - 2,
      "fill-opacity": 0,
    }));
    highlights.forEach((node) => svg.appendChild(node));
    const columns = columnLabels.map((label, c) => {
      const x = left + c * CELL + CELL / 2 + 4;
      const text = el("text", {
        class: "column-label", "data-col": c, x, y: top - 6,
        transform: `rotate(-90 ${x} ${top - 6})`,
      }, cut(label));
      text.appendChild(el("title", {}, label));
      svg.appendChild(text);
      return text;
    });
    const outline = el("rect", {
      class: "row-outline", x: left - 1, y: 0, width: columnLabels.length * CELL + 2,
      height: CELL + 2, visibility: "hidden",
    });
    const focus = (r) => {
      const row = matrix[r];
      const peak = Math.max(...row, 1e-9);
      highlights.forEach((node, c) => node.setAttribute("fill-opacity", (row[c] / peak).toFixed(3)));
      columns.forEach((node, c) => node.classList.toggle("strong", row[c] >= peak / 2));
      outline.setAttribute("y", top + r * CELL - 1);
      outline.setAttribute("visibility", "visible");
      svg.querySelectorAll(".row-label").forEach((node) =>
        node.classList.toggle("focused", Number(node.dataset.row) === r));
    };
    const blur = () => {
      highlights.forEach((node) => node.setAttribute("fill-opacity", 0));
      columns.forEach((node) => node.classList.remove("strong"));
      outline.setAttribute("visibility", "hidden");
      svg.querySelectorAll(".row-label").forEach((node) => node.classList.remove("focused"));
    };
    rowLabels.forEach((label, r) => {
      const y = top + r * CELL;
      const row = el("g", { class: "heatmap-row", "data-row": r });
      const text = el("text", {
        class: "row-label", "data-row": r, x: left - 6, y: y + CELL / 2 + 4, "text-anchor": "end",
      }, cut(label));
      text.appendChild(el("title", {}, label));
      row.appendChild(text);
      matrix[r].forEach((value, c) => {
        const cell = el("rect", {
          class: "cell", x: left + c * CELL, y, width: CELL, height: CELL, fill: colour(value),
          "data-row": r, "data-col": c, "data-value": value,
        });
        cell.appendChild(el("title", {}, `${label} → ${columnLabels[c]}: ${value.toFixed(4)}`));
        row.appendChild(cell);
      });
      row.addEventListener("mouseenter", () => focus(r));
      row.addEventListener("mouseleave", blur);
      svg.appendChild(row);
    });
    svg.appendChild(outline);
    svg.appendChild(legend(left + columnLabels.length * CELL + 24, top));
    container.appendChild(svg);
    return svg;
  }

  function legend(x, y) {
    const group = el("g", { class: "legend" });
    const defs = el("defs");
    const gradient = el("linearGradient", { id: "attention-scale", x1: 0, y1: 1, x2: 0, y2: 0 });
    STOPS.forEach((_, i) => gradient.appendChild(el("stop", {
      offset: i / (STOPS.length - 1), "stop-color": colour(i / (STOPS.length - 1)),
    })));
    defs.appendChild(gradient);
    group.appendChild(defs);
    group.appendChild(el("rect", { x, y, width: 14, height: 110, fill: "url(#attention-scale)" }));
    group.appendChild(el("text", { x: x + 20, y: y + 8 }, "1"));
    group.appendChild(el("text", { x: x + 20, y: y + 112 }, "0"));
    return group;
  }

  // A linearized tree, "(S (NP John )NP (VP sleeps )VP . )S": "(X" opens a constituent,
  // ")X" closes it, anything else is a word. Returns {roots, problems}; brackets left open
  // are closed at the end and stray closers skipped, each noted in `problems`.
  function parseTree(text) {
    const top = { label: "", children: [] };
    const stack = [top];
    const problems = [];
    for (const token of text.trim().split(/\s+/).filter((t) => t)) {
      const current = stack[stack.length - 1];
      if (token.length > 1 && token[0] === "(") {
        const node = { label: token.slice(1), children: [] };
        current.children.push(node);
        stack.push(node);
      } else if (token[0] === ")") {
        if (stack.length === 1) {
          problems.push(`a closing ${token} with no open bracket`);
        } else {
          if (token.length > 1 && token.slice(1) !== current.label) {
            problems.push(`${token} closes (${current.label}`);
          }
          stack.pop();
        }
      } else {
        current.children.push({ word: token });
      }
    }
    if (stack.length > 1) problems.push(`${stack.length - 1} bracket(s) left open`);
    return { roots: top.children, problems };
  }

  function tree(container, text) {
    const { roots, problems } = parseTree(text);
    container.replaceChildren();
    const LEVEL = 38;
    const GAP = 14;
    let cursor = 10;
    let depth = 0;
    const place = (node, level) => {
      depth = Math.max(depth, level);
      if (node.word !== undefined) {
        const width = Math.max(cut(node.word).length * CHAR, 12);
        node.x = cursor + width / 2;
        cursor += width + GAP;
        return;
      }
      node.children.forEach((child) => place(child, level + 1));
      if (node.children.length === 0) {
        node.x = cursor + 10;
        cursor += 20 + GAP;
      } else {
        node.x = (node.children[0].x + node.children[node.children.length - 1].x) / 2;
      }
      node.level = level;
    };
    roots.forEach((root) => place(root, 0));
    const leafY = (depth + 1) * LEVEL;
    const width = Math.max(cursor + 10, 60);
    const height = leafY + 30;
    const svg = el("svg", {
      width, height, viewBox: `0 0 ${width} ${height}`, class: "tree", role: "img",
    });
    svg.appendChild(el("title", {}, text));
    const lines = el("g", { class: "edges" });
    const nodes = el("g", { class: "nodes" });
    const yOf = (node) => (node.word !== undefined ? leafY : node.level * LEVEL + 20);
    const draw = (node) => {
      const y = yOf(node);
      const kind = node.word !== undefined ? "leaf" : "constituent";
      const group = el("g", { class: `node ${kind}` });
      group.appendChild(el("text", { x: node.x, y, "text-anchor": "middle" },
        kind === "leaf" ? cut(node.word) : node.label));
      nodes.appendChild(group);
      (node.children || []).forEach((child) => {
        lines.appendChild(el("line", { x1: node.x, y1: y + 5, x2: child.x, y2: yOf(child) - 14 }));
        draw(child);
      });
    };
    roots.forEach(draw);
    svg.appendChild(lines);
    svg.appendChild(nodes);
    container.appendChild(svg);
    return problems;
  }

  return { heatmap, tree, parseTree, colour };
})();
