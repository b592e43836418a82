// privstream dashboard: polls /api/state once a second and redraws when its version changes.
// Every string from the topics is put in the page as text (textContent), never as HTML.
"use strict";

let version = null;
let state = null;
let selected = null; // index into state.releases chosen in the list; null: follow the latest

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function num(x, digits) {
  if (x === null || x === undefined) return "—";
  if (Number.isInteger(x) && Math.abs(x) < 1e15) return String(x);
  const a = Math.abs(x);
  const d = digits || 4;
  const text = a !== 0 && (a < 1e-3 || a >= 1e15) ? Number(x).toExponential(d - 1) : Number(x).toPrecision(d);
  // drop trailing zeros of the mantissa: 0.05000 -> 0.05, 1.000e-6 -> 1e-6
  return text.replace(/(\.\d*?)0+(e|$)/, "$1$2").replace(/\.(e|$)/, "$1").replace("e+", "e");
}

function utc(ms) {
  return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "");
}

function row(cells, numeric) {
  const tr = el("tr");
  cells.forEach((cell, i) => tr.appendChild(el("td", cell, numeric && numeric.includes(i) ? "num" : null)));
  return tr;
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function shownRelease() {
  const releases = state.releases;
  if (!releases.length) return null;
  if (selected !== null && selected < releases.length) return releases[selected];
  // the latest release with items (a refusal is shown as a banner above it)
  for (let i = releases.length - 1; i >= 0; i--) if (releases[i].kind !== "ReleaseRefused") return releases[i];
  return releases[releases.length - 1];
}

function renderGuarantee(release) {
  const box = document.getElementById("guarantee");
  if (!release || !release.guarantee) {
    box.replaceChildren(el("span", "waiting for a release…", "muted"));
    return;
  }
  const g = release.guarantee;
  const b = release.error_bound;
  const fields = [
    ["ε", num(g.epsilon)],
    ["δ", num(g.delta)],
    ["mechanism", g.mechanism],
    ["privacy unit", g.privacy_unit],
  ];
  if (b && b.beta !== null) fields.push(["bound holds w.p. ≥", num(1 - b.beta, 6)]);
  const nodes = fields.map(([name, value]) => {
    const span = el("span", null, "field");
    span.appendChild(el("b", name));
    span.appendChild(document.createTextNode(value));
    return span;
  });
  const relation = el("span", null, "field relation");
  relation.appendChild(el("b", "neighbour relation"));
  relation.appendChild(document.createTextNode(g.neighbour_relation));
  nodes.push(relation);
  box.replaceChildren(...nodes);
}

function renderRelease(release) {
  const label = document.getElementById("release-label");
  const note = document.getElementById("bound-note");
  renderGuarantee(release);
  label.textContent = release ? `${release.label} · ${release.kind} · ${utc(release.time)} UTC` : "";
  const items = release ? release.items : [];
  const hasBars = items.some((it) => it.low !== null);
  const trace = {
    type: "bar",
    x: items.map((it) => it.item),
    y: items.map((it) => it.count),
    marker: { color: items.map((it) => (it.heavy ? "#d92d20" : "#2e90fa")) },
    hovertemplate: "%{x}: %{y}<extra></extra>",
  };
  if (hasBars) {
    trace.error_y = {
      type: "data",
      symmetric: false,
      array: items.map((it) => it.high - it.count),
      arrayminus: items.map((it) => it.count - it.low),
      color: "#101828",
      thickness: 1.5,
      width: 6,
    };
  }
  Plotly.react("releases-chart", [trace], {
    margin: { l: 60, r: 20, t: 10, b: 80 },
    xaxis: { type: "category", title: { text: "item" }, automargin: true },
    yaxis: { title: { text: "noisy count" }, zeroline: true },
    showlegend: false,
  }, { displayModeBar: false, responsive: true });
  const b = release ? release.error_bound : null;
  if (b) {
    const s = b.sketch_term ? ` + S, S = ${b.sketch_term} (data-dependent, not drawn)` : "";
    note.textContent = `Whiskers: with probability ≥ 1 − β (β = ${num(b.beta)}) every item's true count lies in ` +
      `[count − ${num(b.above)}, count + ${num(b.below)}${s}]. ${b.derivation}`;
  } else if (release && release.kind === "WindowRelease") {
    note.textContent = "Sliding-window estimates of the public query set (red: heavy hitters); " +
      "the record states its theorem, not a per-item interval.";
  } else if (release && release.kind === "LdpRelease") {
    note.textContent = "Debiased local-DP estimates of the heavy part (clamped at 0), rounded; " +
      "the record states its scheme's guarantee, not a per-item interval.";
  } else {
    note.textContent = "";
  }
  fill(document.querySelector("#items-table tbody"), items.map((it) => row([
    it.item,
    num(it.count),
    it.low === null ? "—" : `[${num(it.low)}, ${num(it.high)}${b && b.sketch_term ? " + S" : ""}]`,
  ], [1])));
}

function renderRefusal() {
  const box = document.getElementById("refused");
  const last = state.releases[state.releases.length - 1];
  if (last && last.kind === "ReleaseRefused") {
    box.hidden = false;
    box.textContent = `${last.label} (${utc(last.time)} UTC): ${last.reason}. ${last.detail}`;
  } else {
    box.hidden = true;
  }
}

function renderRecent() {
  const tbody = document.querySelector("#recent-table tbody");
  const shown = shownRelease();
  const rows = [];
  state.releases.forEach((r, i) => {
    const tr = row([
      utc(r.time),
      `${r.kind === "Release" ? "" : r.kind + " "}${r.label}`,
      r.kind === "ReleaseRefused" ? r.reason : r.items.length,
      r.guarantee ? num(r.guarantee.epsilon) : "—",
      r.guarantee ? num(r.guarantee.delta) : "—",
    ], [2, 3, 4]);
    if (r === shown) tr.className = "selected";
    tr.addEventListener("click", () => {
      selected = i === state.releases.length - 1 ? null : i;
      render();
    });
    rows.push(tr);
  });
  rows.reverse(); // newest first
  fill(tbody, rows);
  document.getElementById("follow").hidden = selected === null;
}

function renderLedger() {
  const traces = [];
  const rows = [];
  const palette = ["#7a5af8", "#12b76a", "#f79009", "#ee46bc", "#2e90fa", "#667085"];
  Object.entries(state.ledger).forEach(([ledgerId, entries], i) => {
    const color = palette[i % palette.length];
    const last = entries[entries.length - 1];
    traces.push({
      type: "scatter",
      mode: "lines+markers",
      line: { shape: "hv", color },
      name: `${ledgerId}: ε spent (${last.composition})`,
      x: entries.map((e) => new Date(e.time)),
      y: entries.map((e) => e.epsilon_spent),
      text: entries.map((e) => `#${e.sequence} ${e.last_charge}`),
      hovertemplate: "%{text}<br>ε spent %{y}<extra></extra>",
    });
    traces.push({
      type: "scatter",
      mode: "lines",
      line: { dash: "dash", color, width: 1 },
      name: `${ledgerId}: ε total`,
      x: [new Date(entries[0].time), new Date(last.time)],
      y: [last.epsilon_total, last.epsilon_total],
      hoverinfo: "skip",
    });
    rows.push(row([
      ledgerId,
      last.sequence,
      `${num(last.epsilon_spent)} / ${num(last.epsilon_total)}`,
      `${num(last.delta_spent)} / ${num(last.delta_total)}`,
      last.composition,
      last.last_charge,
      utc(last.time),
    ], [1]));
  });
  Plotly.react("ledger-chart", traces, {
    margin: { l: 60, r: 20, t: 10, b: 40 },
    xaxis: { title: { text: "time (UTC)" } },
    yaxis: { title: { text: "ε spent" }, rangemode: "tozero" },
    legend: { orientation: "h", y: -0.25 },
  }, { displayModeBar: false, responsive: true });
  fill(document.querySelector("#ledger-table tbody"), rows);
}

function renderHeader(info, status) {
  document.getElementById("source").textContent =
    `releases: ${info.topic} · ledger: ${info.ledger_topic} · broker: ${info.bootstrap}`;
  const parts = Object.entries(status).map(([name, s]) => `${name}: ${s}`);
  document.getElementById("status").textContent =
    `${parts.join(" · ")} · ${state.releases.length} releases kept · updated ${utc(Date.now())} UTC`;
}

function render() {
  if (!state) return;
  renderRefusal();
  renderRelease(shownRelease());
  renderRecent();
  renderLedger();
}

async function poll() {
  try {
    const response = await fetch(`/api/state${version === null ? "" : `?since=${version}`}`, { cache: "no-store" });
    const body = await response.json();
    if (body.releases !== undefined) {
      state = body;
      version = body.version;
      render();
      renderHeader(body.info, body.status);
      document.body.dataset.version = String(version);
    }
  } catch (error) {
    document.getElementById("status").textContent = `dashboard server unreachable (${error}); retrying…`;
  } finally {
    setTimeout(poll, 1000);
  }
}

document.getElementById("follow").addEventListener("click", () => {
  selected = null;
  render();
});
poll();
