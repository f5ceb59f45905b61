// The deepledger report viewer: reads the JSON written into this page and draws the
// run (or the comparison of runs), the task table and one task's trajectory at a time.
// Every text from a run goes into the page as text (textContent), never as markup: a
// model's reply or a tool result may hold anything.

const DATA = JSON.parse(document.getElementById("report-data").textContent);
const PACKED = JSON.parse(document.getElementById("report-packed").textContent);
const main = document.getElementById("report");

// -- small helpers -------------------------------------------------------------------
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "text") node.textContent = value;
    else if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}
const isNum = (v) => typeof v === "number" && Number.isFinite(v);
const fmtInt = (v) => (isNum(v) ? Math.round(v).toLocaleString("en-US") : "–");
const fmtPct = (v) => (isNum(v) ? `${(100 * v).toFixed(1)}%` : "n/a");
const fmtCost = (v) => (isNum(v) ? `$${v < 1 ? v.toFixed(4) : v.toFixed(2)}` : "unknown");
function fmtTokens(v) {
  if (!isNum(v)) return "–";
  if (Math.abs(v) >= 1e6) return `${(v / 1e6).toFixed(2)}M`;
  if (Math.abs(v) >= 1e4) return `${(v / 1e3).toFixed(1)}k`;
  return fmtInt(v);
}
function fmtSeconds(seconds) {
  if (!isNum(seconds)) return "–";
  const s = Math.round(seconds);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  return h ? `${h}h ${m}m ${r}s` : m ? `${m}m ${r}s` : `${r}s`;
}
const section = (id, title, ...children) => el("section", { id }, el("h2", { text: title }), ...children);
const card = (label, value, note) =>
  el("div", { class: "card" }, el("div", { class: "label", text: label }),
    el("div", { class: "value", text: value }), note ? el("div", { class: "note", text: note }) : null);
const kvTable = (rows) =>
  el("table", { class: "kv" }, el("tbody", {}, rows.map(([k, v]) =>
    el("tr", {}, el("th", { text: k }), el("td", { text: v === null || v === undefined ? "–" : String(v) })))));
const banner = (kind, ...children) => el("div", { class: `banner ${kind}` }, ...children);
const statusBadge = (status) => el("span", { class: `status ${status}`, text: status });

// A layer whose dataset is empty (no compactions in this run, say) is left out: Vega
// would warn about the empty extent of its fields.
function withoutEmptyLayers(spec, datasets) {
  if (!spec.layer) return spec;
  const layer = spec.layer.filter((l) => !(l.data && l.data.name && !(datasets[l.data.name] || []).length));
  return { ...spec, layer: layer.length ? layer : spec.layer.slice(0, 1) };
}

// The model's window is drawn only when the data comes near it (a quarter of it or
// more): a rule far above would squeeze a 2k-token task flat onto the axis.
const WINDOW_SHOWN_FROM = 0.25;
function windowNearData(rules, ...rowSets) {
  let largest = 0; // a loop, not Math.max(...rows): a long run has more rows than arguments fit
  for (const rows of rowSets) for (const row of rows || []) if (isNum(row.input) && row.input > largest) largest = row.input;
  return (rules || []).filter((rule) => largest >= WINDOW_SHOWN_FROM * rule.tokens);
}
function windowNote(rules, shown) {
  const rule = (rules || [])[0];
  if (!rule || shown.length) return null;
  return el("p", { class: "muted window-note", text: `The model's window (${fmtInt(rule.tokens)} tokens, llm.max_context_length) is far above these prompts: not drawn.` });
}

async function draw(target, spec, datasets) {
  const own = Object.entries(datasets).filter(([name]) => name !== "window");
  if (own.every(([, rows]) => !rows.length)) {
    target.replaceChildren(el("p", { class: "muted", text: "No data." }));
    return;
  }
  try {
    const full = { ...withoutEmptyLayers(spec, datasets), datasets: { ...(spec.datasets || {}), ...datasets } };
    const drawn = await window.vegaEmbed(target, full, { actions: false, renderer: "canvas" });
    target.vegaView = drawn.view; // kept on its element: a test (or a console) can ask it its scales
  } catch (error) {
    target.replaceChildren(el("p", { class: "err", text: `This chart could not be drawn: ${error}` }));
    throw error;
  }
}

async function unpack(base64) {
  const bytes = Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  return JSON.parse(await new Response(stream).text());
}

// -- the run -------------------------------------------------------------------------
function runBanners(run) {
  const out = [];
  if (run.state !== "finished" && run.kind === "run") {
    out.push(banner("info", (run.state === "running" ? "This question is being answered now: its trajectory so far is shown. "
      : "This question was stopped before it was answered: its trajectory up to then is shown. ") +
      "Rebuild this page at any time with: ", el("code", { text: `deepledger report ${run.dir}` })));
  } else if (run.state !== "finished") {
    out.push(banner("info",
      (run.state === "running" ? "This run has not finished: it is running now. "
        : "This run has not finished: it was stopped before its end (run the same bench command to resume it). ") +
      `${run.tasks_shown} tasks are shown (those without a result are marked unfinished)` +
      (run.tasks_not_started ? `; ${run.tasks_not_started} more have not started.` : ".") +
      ` Rebuild this page at any time with: `, el("code", { text: `deepledger report ${run.dir}` })));
  }
  if (run.missing && run.missing.length) {
    out.push(banner("warn", `${run.missing.length} part(s) of the run directory could not be read; the report shows the rest.`,
      el("details", {}, el("summary", { text: "what is missing" }),
        el("ul", {}, run.missing.map((m) => el("li", { text: m }))))));
  }
  if (run.recorded_version && run.recorded_version !== run.deepledger_version) {
    out.push(banner("info", `Recorded by deepledger ${run.recorded_version}; read by ${run.deepledger_version}.`));
  }
  return out;
}

// Who priced the run's costs (summary.json's prices), as the printed summary says it.
function pricedBy(prices) {
  const entries = Object.entries(prices || {});
  return entries.map(([model, source]) => source === "unpriced" ? `unpriced: ${model}`
    : entries.length === 1 ? `priced by ${source}` : `${model} priced by ${source}`).join("; ");
}

function summaryCards(run) {
  const s = run.summary || {};
  const t = s.tasks || {};
  // A question still being answered (or stopped) has no record for the summary to sum:
  // its tokens so far are its row's, and its cost is known only once it ends.
  const open = run.kind === "run" && !t.finished ? DATA.tasks[0] : null;
  const tokens = open ? { input: open.input_tokens, output: open.output_tokens, cache_read: open.cache_read_tokens }
    : (s.tokens || {}).total || {};
  const turns = s.turns || {}, calls = s.tool_calls || {};
  return el("div", { class: "cards", id: "run-cards" },
    run.kind === "run" ? card("verdict", "not judged", "a question asked with deepledger run has no ground truth")
      : card("accuracy (pass@1)", fmtPct(s.accuracy), `${fmtInt(s.correct_first_attempt)} of ${fmtInt(t.judged)} judged`),
    s.k > 1 ? card(`pass@${s.k}`, fmtPct(s.pass_at_k), `${fmtInt(s.correct_any_attempt)} correct in any attempt`) : null,
    t.unjudged ? el("div", { class: "card", id: "unjudged-card" }, el("div", { class: "label", text: "unjudged" }),
      el("div", { class: "value", text: fmtInt(t.unjudged) }),
      el("div", { class: "note", text: "the judge gave no verdict: not in accuracy (a resume asks again)" })) : null,
    card("tasks", `${fmtInt(t.finished)} finished`,
      `${fmtInt(t.errors)} errors · ${t.expected ? fmtInt(t.expected) + " expected" : "expected unknown"}`),
    card("input tokens", fmtTokens(tokens.input), `cache read ${fmtTokens(tokens.cache_read)} · cache write ${fmtTokens(tokens.cache_write)}`),
    card("output tokens", fmtTokens(tokens.output), (s.judge_tokens || {}).input
      ? `the judge's model: ${fmtTokens(s.judge_tokens.input)} in · ${fmtTokens(s.judge_tokens.output)} out` : "the judge used no model"),
    (s.extraction_tokens || {}).input ? card("page extraction", fmtTokens(s.extraction_tokens.input),
      `input tokens of scrape_and_extract_info's model (${fmtTokens(s.extraction_tokens.output)} out, ${fmtInt(s.extraction_tokens.tasks)} tasks); included above`) : null,
    open ? card("cost", "unknown", run.state === "running" ? "priced once the question is answered" : "not priced: stopped before its end")
      : card("cost", fmtCost(s.cost_total), [s.cost_unknown_tasks ? `${s.cost_unknown_tasks} tasks unpriced` : `${fmtCost(s.cost_mean_per_task)} per task`, pricedBy(s.prices)].filter(Boolean).join(" · ")),
    card("turns per task", isNum(turns.mean) ? turns.mean.toFixed(1) : "–", `median ${turns.median ?? "–"} · max ${turns.max ?? "–"}`),
    card("tool calls per task", isNum(calls.mean) ? calls.mean.toFixed(1) : "–", `median ${calls.median ?? "–"} · max ${calls.max ?? "–"}`),
    card("wall time", fmtSeconds(run.wall_seconds), run.sessions > 1 ? `over ${run.sessions} sessions (resumed)` : run.state),
    budgetCard(s.budget),
  );
}

// What a limit counts, in its own unit.
function budgetAmount(kind, value) {
  if (String(kind).endsWith("usd")) return fmtCost(value);
  if (String(kind).endsWith("seconds")) return fmtSeconds(value);
  return `${fmtTokens(value)} tokens`;
}

// The run's budget (spent / limit, left) and the task limits; none set: no card.
function budgetCard(b) {
  if (!b || !(Object.keys(b.limits || {}).length || Object.keys(b.limits_hit || {}).length)) return null;
  const limits = b.limits || {};
  const run = [];
  if (isNum(limits.max_cost_usd)) run.push(`${fmtCost(b.spent_usd)} / ${fmtCost(limits.max_cost_usd)}`);
  if (isNum(limits.max_tokens)) run.push(`${fmtTokens(b.spent_tokens)} / ${fmtTokens(limits.max_tokens)} tokens`);
  const notes = [];
  if (isNum(b.left_usd)) notes.push(`${fmtCost(b.left_usd)} left`);
  if (isNum(b.left_tokens)) notes.push(`${fmtTokens(b.left_tokens)} tokens left`);
  const perTask = Object.entries(limits).filter(([k]) => k.startsWith("task_"))
    .map(([k, v]) => budgetAmount(k, v));
  if (perTask.length) notes.push(`per task at most ${perTask.join(", ")}`);
  const hits = Object.entries(b.limits_hit || {}).map(([k, n]) => `${k} ${n}`);
  if (hits.length) notes.push(`tasks stopped by a limit: ${hits.join(", ")}`);
  if (b.exhausted && b.tasks_not_started) notes.push(`spent: ${b.tasks_not_started} tasks not started (raise the budget and resume)`);
  return el("div", { class: "card", id: "budget-card" }, el("div", { class: "label", text: "budget" }),
    el("div", { class: "value", text: run.join(" · ") || "per task only" }),
    el("div", { class: "note", text: notes.join(" · ") }));
}

function groupTable(title, groups, unit) {
  const rows = Object.entries(groups || {});
  if (!rows.length) return null;
  return el("div", {}, el("h3", { text: title }), el("table", {},
    el("thead", {}, el("tr", {}, el("th", { text: "" }), el("th", { class: "num", text: unit }),
      el("th", { class: "num", text: "correct" }), el("th", { class: "num", text: "accuracy" }))),
    el("tbody", {}, rows.map(([name, g]) => el("tr", {}, el("td", { text: name }),
      el("td", { class: "num", text: fmtInt(g.tasks ?? g.attempts) }),
      el("td", { class: "num", text: `${fmtInt(g.correct)} / ${fmtInt(g.judged)}` }),
      el("td", { class: "num", text: fmtPct(g.accuracy) }))))));
}

// Shares and savings are fractions; means and slopes keep a decimal; the rest are counts.
function economicsValue(key, value) {
  if (!isNum(value)) return value;
  if (key.endsWith("_share") || key.startsWith("saving")) return fmtPct(value);
  if (key.startsWith("mean") || key === "added_per_turn") return value.toLocaleString("en-US", { maximumFractionDigits: 1 });
  return fmtInt(value);
}

function economicsRows(e) {
  if (!e) return [["token economics", "not recorded"]];
  if (e.unavailable) return [["token economics", `unavailable: ${e.unavailable}`]];
  return Object.entries(e).filter(([, v]) => !(Array.isArray(v) || (v && typeof v === "object")))
    .map(([key, value]) => [key.replaceAll("_", " "), economicsValue(key, value)]);
}

function runSection(run) {
  const s = run.summary || {};
  const config = Object.entries(run.config).filter(([, v]) => v !== null && v !== undefined).map(([k, v]) => [k, Array.isArray(v) ? v.join(", ") : v]);
  const ends = Object.entries(s.end_reasons || {}).map(([k, v]) => [k, fmtInt(v)]);
  const pm = s.post_mortems || {};
  return section("run", "Run",
    summaryCards(run),
    el("div", { class: "grid2", style: "margin-top:14px" },
      el("div", { class: "panel" }, el("h3", { text: "Configuration" }), kvTable([
        ["run directory", run.dir], ["benchmark", run.benchmark],
        ["command-line overrides", (run.overrides || []).join(" ") || "none"], ...config,
        ["started", run.started_at], ["finished", run.finished_at || "not yet"]])),
      el("div", { class: "panel", id: "outcomes" },
        // A question asked with `deepledger run` is never judged and never retried with a
        // post-mortem: both tables would be empty rows of "0 / 0".
        run.kind === "run" ? null : groupTable("Accuracy by answer provenance", s.by_provenance, "tasks"),
        run.kind === "run" ? null : groupTable("First attempt vs carried-over post-mortems", {
          "no post-mortem carried": pm.without || {}, "post-mortem(s) carried": pm.with || {} }, "attempts"),
        el("h3", { text: "End reasons" }), kvTable(ends)),
      el("div", { class: "panel" }, el("h3", { text: "Token economics" }), kvTable(economicsRows(s.token_economics))),
      endpointsPanel(s.endpoints),
      protocolPanel(s.protocol_metrics)));
}

const fmtRate = (v) => (isNum(v) ? v.toFixed(3) : "n/a");
const fmtShare = (v, n, of) => `${fmtRate(v)} (${fmtInt(n)}/${fmtInt(of)})`;

// The numbers the suite's official grader publishes (summary.protocol_metrics, absent
// when the preset chose none); bench/protocol_metrics.py defines each.
function protocolRows(p) {
  const rows = [];
  const q = p.simpleqa;
  if (q) rows.push(["SimpleQA F1", fmtRate(q.f1)],
    ["SimpleQA accuracy given attempted", fmtShare(q.accuracy_given_attempted, q.correct, q.correct + q.incorrect)],
    ["SimpleQA not attempted", fmtShare(q.not_attempted_rate, q.not_attempted, q.graded)],
    ["SimpleQA correct / incorrect / not attempted", `${q.correct} / ${q.incorrect} / ${q.not_attempted}`]);
  const c = p.calibration_error;
  if (c) rows.push(["calibration error (RMS, %)", isNum(c.value)
    ? `${c.value.toFixed(0)} over ${fmtInt(c.answers)} answers in ${c.bins} bins; as HLE's script prints it (last bin left out): ${c.as_published.toFixed(0)}`
      + (c.without_confidence ? `; ${fmtInt(c.without_confidence)} without a confidence, taken as 100` : "")
    : `n/a: ${c.reason}`]);
  const i = p.confidence_interval;
  if (i) rows.push(["HLE accuracy, 95 % interval", isNum(i.accuracy) ? `${i.accuracy.toFixed(2)}% +/- ${i.half_width.toFixed(2)}% (n = ${fmtInt(i.n)})` : "n/a"]);
  const d = p.deepsearchqa;
  if (d) rows.push(["DeepSearchQA F1 (every task)", `${fmtRate(d.f1_mean)} over ${fmtInt(d.graded)}`],
    ["fully correct", fmtShare(d.fully_correct_rate, d.fully_correct, d.graded)],
    ["fully incorrect", fmtShare(d.fully_incorrect_rate, d.fully_incorrect, d.graded)],
    ["correct with extraneous answers", d.correct_with_extraneous_rate === null && d.outcome_unknown
      ? `n/a (${d.outcome_unknown} partly right without an outcome label)` : fmtShare(d.correct_with_extraneous_rate, d.correct_with_extraneous, d.graded)]);
  const a = p.avg_at_k;
  if (a) rows.push([`avg@${a.k} (mean accuracy over attempts)`, isNum(a.value) ? fmtRate(a.value) : `n/a: ${a.reason || "nothing graded"}`]);
  return rows;
}

function protocolPanel(p) {
  if (!p) return null;
  const rows = protocolRows(p);
  return el("div", { class: "panel", id: "protocol-metrics" }, el("h3", { text: "Published metrics" }),
    rows.length ? kvTable(rows) : null,
    Object.entries(p.breakdown || {}).map(([field, groups]) => groupTable(`Accuracy by ${field}`, groups, "tasks")));
}

// llm.endpoints: one row per server (summary.endpoints, absent with one server).
function endpointsPanel(endpoints) {
  const rows = Object.entries(endpoints || {});
  if (!rows.length) return null;
  const seconds = (v) => (isNum(v) ? `${v.toFixed(2)}s` : "–");
  const heads = ["endpoint", "requests", "errors", "task attempts", "latency mean", "p50", "p95", "cache read", "moved in", "moved out"];
  return el("div", { class: "panel", id: "endpoints" }, el("h3", { text: "Model endpoints" }), el("table", {},
    el("thead", {}, el("tr", {}, heads.map((h, i) => el("th", { class: i ? "num" : null, text: h })))),
    el("tbody", {}, rows.map(([url, c]) => el("tr", {}, el("td", { text: url }),
      [fmtInt(c.requests), fmtInt(c.errors), fmtInt(c.tasks), seconds(c.latency_mean_seconds),
        seconds(c.latency_p50_seconds), seconds(c.latency_p95_seconds), fmtPct(c.cache_read_share),
        fmtInt(c.moved_in), fmtInt(c.moved_out)].map((text) => el("td", { class: "num", text })))))));
}

function chartsSection() {
  const ds = DATA.datasets;
  const panel = (id, title, note) => el("div", { class: id === "chart-prompt" ? "panel wide" : "panel" }, el("h3", { text: title }),
    note ? el("p", { class: "muted", text: note }) : null, el("div", { class: "chart", id }));
  const node = section("charts", "Tokens and turns", el("div", { class: "grid2" },
    panel("chart-prompt", "Prompt tokens per turn against the window",
      `One line per attempt (${DATA.lines_drawn} of ${DATA.tasks.length} tasks drawn); ` +
      `marks show where the window guard, a compaction or the loop check acted.`),
    panel("chart-cumulative", "Cumulative billed input tokens, with and without a cache",
      "Every call of the agent's model in the order made (sub-agents' and interrupted retries' included, the judge's apart): " +
      "all input tokens, and those the provider did not serve from its cache."),
    panel("chart-turns", "Turns per task", null)));
  runChartsDrawn = new Promise((resolve) => queueMicrotask(async () => {
    try { await drawRunCharts(node, ds); } finally { resolve(); }
  }));
  return node;
}

async function drawRunCharts(node, ds) {
  const rule = windowNearData(ds.window, ds.calls, ds.marks);
  const prompt = node.querySelector("#chart-prompt");
  prompt.before(windowNote(ds.window, rule) || "");
  await draw(prompt, DATA.charts.prompt_run, { calls: ds.calls, marks: ds.marks, window: rule });
  await draw(node.querySelector("#chart-cumulative"), DATA.charts.cumulative, { cumulative: ds.cumulative });
  await draw(node.querySelector("#chart-turns"), DATA.charts.turns, { turns: ds.turns });
}

// -- the task table ------------------------------------------------------------------
const COLUMNS = [
  ["id", "task", "text"], ["status", "status", "status"], ["answer", "answer", "text"],
  ["ground_truth", "ground truth", "text"], ["attempts", "attempts", "num"],
  ["post_mortems", "post-mortems", "num"], ["turns", "turns", "num"],
  ["tool_calls", "tool calls", "num"], ["input_tokens", "input", "tokens"],
  ["output_tokens", "output", "tokens"], ["cache_read_tokens", "cache read", "tokens"],
  ["cost", "cost", "cost"], ["end_reason", "end reason", "text"],
  ["provenance", "provenance", "text"], ["seconds", "time", "seconds"],
  ["judgement", "judgement", "text"],
];

function taskSection(tasks, onOpen) {
  // With pass@k, a task solved on a later attempt is "correct": show the first attempt too.
  // A `deepledger run` question has no ground truth and carries no post-mortems: no column.
  const columns = (DATA.run.summary || {}).k > 1
    ? [...COLUMNS.slice(0, 2), ["first_attempt", "1st attempt", "status"], ...COLUMNS.slice(2)]
    : DATA.run.kind === "run" ? COLUMNS.filter(([key]) => key !== "ground_truth" && key !== "post_mortems") : COLUMNS;
  const state = { sort: null, descending: false, text: "", status: "", end: "", provenance: "" };
  const options = (key) => ["", ...new Set(tasks.map((t) => t[key]).filter((v) => v))];
  const select = (key, label) => el("select", { "aria-label": label, id: `filter-${key}`,
    onchange: (e) => { state[key === "end_reason" ? "end" : key] = e.target.value; refresh(); } },
    options(key).map((v) => el("option", { value: v, text: v || `any ${label}` })));
  const search = el("input", { type: "search", id: "filter-text", placeholder: "filter: task id, question, answer, judgement…",
    oninput: (e) => { state.text = e.target.value.toLowerCase(); refresh(); } });
  const count = el("span", { class: "count", id: "task-count" });
  const head = el("tr", {}, columns.map(([key, label, type]) => el("th", {
    class: ["num", "tokens", "cost", "seconds"].includes(type) ? "num" : null, "data-key": key, text: label,
    onclick: () => { state.descending = state.sort === key ? !state.descending : false; state.sort = key; refresh(); } })));
  const body = el("tbody");
  const table = el("table", { id: "task-table" }, el("thead", {}, head), body);
  const rows = tasks.map((task, index) => {
    const tr = el("tr", { "data-index": index, title: task.question, onclick: () => onOpen(index) },
      columns.map(([key, , type]) => cell(task[key], type)));
    return { task, tr, haystack: [task.id, task.question, task.answer, task.ground_truth, task.judgement].join("\n").toLowerCase() };
  });
  function refresh() {
    let shown = rows.filter(({ task, haystack }) =>
      (!state.text || haystack.includes(state.text)) && (!state.status || task.status === state.status) &&
      (!state.end || task.end_reason === state.end) && (!state.provenance || task.provenance === state.provenance));
    if (state.sort) {
      const key = state.sort, sign = state.descending ? -1 : 1;
      shown = [...shown].sort((a, b) => compare(a.task[key], b.task[key], sign));
    }
    for (const th of head.children) {
      th.setAttribute("aria-sort", th.dataset.key === state.sort ? (state.descending ? "descending" : "ascending") : "none");
    }
    body.replaceChildren(...shown.map((r) => r.tr));
    count.textContent = `${shown.length} of ${rows.length} tasks`;
  }
  refresh();
  return section("tasks", "Tasks",
    el("div", { class: "filters" }, search, select("status", "status"), select("end_reason", "end reason"),
      select("provenance", "provenance"), count),
    el("div", { class: "table-wrap" }, table));
}

function compare(a, b, sign) {
  const missing = (v) => v === null || v === undefined || v === "";
  if (missing(a) && missing(b)) return 0;
  if (missing(a)) return 1; // empty cells last, either way
  if (missing(b)) return -1;
  if (isNum(a) && isNum(b)) return sign * (a - b);
  return sign * String(a).localeCompare(String(b), undefined, { numeric: true });
}

function cell(value, type) {
  if (type === "status") return el("td", {}, value ? statusBadge(value) : "–");
  if (type === "num") return el("td", { class: "num", text: fmtInt(value) });
  if (type === "tokens") return el("td", { class: "num", text: fmtTokens(value) });
  if (type === "cost") return el("td", { class: "num", text: isNum(value) ? fmtCost(value) : "–" });
  if (type === "seconds") return el("td", { class: "num", text: fmtSeconds(value) });
  const text = value === null || value === undefined ? "" : String(value);
  return el("td", { class: "clip", title: text, text });
}

// -- one task's trajectory -------------------------------------------------------------
function preBlock(text) { return el("pre", { text: text ?? "" }); }
function collapsible(summary, text, open) {
  return el("details", { open: open || null }, el("summary", { text: summary }), preBlock(text));
}
const ev = (kind, head, ...children) => el("div", { class: `ev ${kind}` }, el("div", { class: "head", text: head }), ...children);
const argsText = (call) => call.raw_arguments || JSON.stringify(call.arguments ?? {}, null, 1);

function usageText(u) {
  if (!u) return "";
  return `${fmtInt(u.input_tokens)} in · ${fmtInt(u.output_tokens)} out` +
    (u.cache_read_tokens ? ` · ${fmtInt(u.cache_read_tokens)} from cache` : "") +
    (u.cache_write_tokens ? ` · ${fmtInt(u.cache_write_tokens)} written to cache` : "");
}

// The cycle the loop check found: its length, how often it came round, where it began.
// Journals from before cycles were looked for hold neither length nor start: a cycle of 1.
function cycleText(e) {
  const length = e.cycle_length ?? 1;
  const what = length === 1 ? "the same turn" : `a cycle of ${length} turns gone round`;
  return `${what} ${e.repeats + 1} times in a row` + (e.since_turn == null ? "" : ` from turn ${e.since_turn}`) +
    (e.with_rollbacks ? " (rolled-back replies included)" : "");
}
// The turns of a journal's cycle, marked where they are shown: from the turn it began at.
const CYCLE_EVENTS = ["assistant", "tool_results", "rollback"];
function cycleStart(events) {
  const looping = events.find((e) => e.event === "looping" && e.since_turn != null);
  return looping ? looping.since_turn : null;
}
function markCycle(node, e, start) {
  if (start !== null && CYCLE_EVENTS.includes(e.event) && e.turn >= start) {
    node.querySelector(".head")?.append(" · in the cycle that ended the loop");
  }
  return node;
}

const RENDER = {
  retry_started: (e) => ev("notice", `attempt ${e.attempt} · retry ${e.retry}${e.final_retry ? " (final retry)" : ""}`,
    `carries ${e.carried_post_mortems ?? 0} post-mortem(s) from earlier retries`),
  // benchmark.execution.resume=turn: the run was killed here and went on from the journal.
  resumed: (e) => ev("notice", (e.at_closing ? `resumed at the closing calls after turn ${e.resumed_at_turn}` :
    `resumed at turn ${e.resumed_at_turn}`) + " after a kill, rebuilt from this journal" +
    (e.replayed_reply ? ` · turn ${e.resumed_at_turn}'s tool calls run again (the kill cut them off)` : ""),
    (e.lost_tool_state?.length ? `state lost with the kill, told to the model: ${e.lost_tool_state.join(", ")} · ` : "") +
    `loop check: ${e.cycle_state ?? "rebuilt"}`),
  resume_fell_back: (e) => ev("notice", `resume=turn could not rebuild the killed run's journal: ${e.reason}`,
    "this retry started from its first turn; the old journal is kept aside as .interrupted-*, its calls counted once"),
  task_started: (e) => ev("request", `task started · tools: ${(e.tools || []).join(", ") || "none"}` + (e.protocol ? ` · protocol ${e.protocol}` : ""),
    collapsible(e.task && e.task.includes("\n") ? "the task as sent (with what it carries)" : "the task as sent", e.task, false)),
  llm_call: (e) => ev("request", `turn ${e.turn} request: ${e.messages} messages sent` +
    (e.left_out_messages ? ` · ${e.left_out_messages} left out by the context strategy` : "") +
    (e.blanked_tool_results ? ` · ${e.blanked_tool_results} tool results blanked (keep_tool_result)` : "") +
    (e.prefix_broken ? ` · cached prefix broken${e.prefix_broken_by ? " by " + e.prefix_broken_by : ""}` : "") +
    (e.forced_call ? " · first call prefilled" : "") + ` · ${usageText(e.usage)} · stop: ${e.stop_reason}` +
    (e.endpoint ? ` · answered by ${e.endpoint}` + (isNum(e.seconds) ? ` in ${e.seconds.toFixed(2)}s` : "") : "") +
    ((e.failed_endpoints || []).length ? ` · failed first at ${e.failed_endpoints.join(", ")}` : "")),
  llm_call_failed: (e) => ev("notice", `${callLabel(e)} request failed on every attempt` +
    ((e.failed_endpoints || []).length ? ` (at ${e.failed_endpoints.join(", ")})` : "") +
    (e.unsent ? ` · ${e.unsent} refused unsent, every server drained` : "") + `: ${e.error}`),
  reply_cut: (e) => ev("notice", `${callLabel(e)} reply cut at its ${fmtInt(e.max_tokens)}-token budget (attempt ${e.attempt}): ` +
    `asked again with ${fmtInt(e.next_max_tokens)} · ${usageText(e.usage)}`,
    el("div", { class: "text", text: ((e.message || {}).content) || "(no text)" })),
  tool_call_repaired: (e) => ev("notice", `turn ${e.turn}: call ${e.call_id} to ${e.written} repaired (${e.kind}): ran ${e.ran} · ${e.detail}`),
  endpoint_moved: (e) => ev("notice", `${e.turn == null ? "closing call" : `turn ${e.turn}`}: moved from ${e.from_endpoint} to ${e.to_endpoint} (${e.reason})`),
  assistant: (e) => {
    const m = e.message || {};
    return ev("assistant", `turn ${e.turn} · assistant` + (e.boxed ? ` · boxed: ${e.boxed}` : ""),
      m.reasoning ? collapsible("reasoning", m.reasoning, false) : null,
      el("div", { class: "text", text: m.content || ((m.tool_calls || []).length ? "(tool calls only: see the results below)" : "(no text)") }));
  },
  tool_results: (e) => ev("tool", `turn ${e.turn} · ${(e.results || []).length} tool result(s)`,
    (e.results || []).map((r, i) => {
      const c = (e.calls || [])[i];
      const name = c ? `${c.server_name ? c.server_name + "." : ""}${c.name}` : r.name || "tool";
      const text = r.content || "";
      const length = isNum(r.chars) ? r.chars : text.length;
      return el("div", { class: "call" },
        c ? el("div", {}, "→ ", el("code", { text: name }), " ", el("span", { class: "muted", text: argsText(c) })) : null,
        el("details", { open: text.length <= 300 || null },
          el("summary", { class: r.is_error ? "err" : null, text: `${r.is_error ? "error from" : "result of"} ${name} (${fmtInt(length)} characters)`
            + (r.cached ? " · from the run's cache" : "") + (r.archived ? ` · archived whole in ${r.archived}` : "")
            + ((r.images || []).length ? ` · ${(r.images || []).length} image(s) sent` : "") }),
          preBlock(text)));
    })),
  rollback: (e) => ev("rollback", `turn ${e.turn} rolled back: ${e.reason}`, e.detail ? el("div", { text: e.detail }) : null,
    collapsible("the rejected reply", e.reply, false)),
  rollback_repeated: (e) => ev("rollback", `turn ${e.turn}: the model gave the rejected reply again (${e.reason}); it is kept`),
  rollback_cap_reached: (e) => ev("rollback", `turn ${e.turn}: rollback cap reached; the reply is kept`),
  pairing_repaired: (e) => ev("notice", `turn ${e.turn}: the request's call/result pairing was repaired`, preBlock(JSON.stringify(e.problems, null, 1))),
  window_exhausted: (e) => ev("guard", `window guard at turn ${e.turn}: ` +
    (e.provider_said ? `the provider reported an overflow (${e.provider_said})` : `estimate ${fmtInt(e.estimate)} ≥ window ${fmtInt(e.limit)}`) +
    ` · ${e.dropped_messages} message(s) dropped, the loop ends`),
  compacted: (e) => ev("compaction", `compaction before turn ${e.turn}: ${e.rounds_replaced} round(s) replaced by notes, ` +
    `${e.rounds_kept} kept · request ${fmtInt(e.tokens_before)} → ${fmtInt(e.tokens_after)} tokens`, collapsible("the notes", e.notes, false)),
  compaction_skipped: (e) => ev("compaction", `compaction skipped before turn ${e.turn}: ${e.reason} (request ${fmtInt(e.request_tokens)}, without older rounds ${fmtInt(e.without_older_rounds)})`),
  compaction_failed: (e) => ev("compaction", `compaction failed before turn ${e.turn}: ${e.reason}`),
  looping: (e) => ev("guard", `turn ${e.turn}: ${cycleText(e)}; the loop ends (looping)`),
  limit_reached: (e) => ev("guard", `limit before turn ${e.turn + 1}: benchmark.execution.${e.kind}=${e.limit} reached ` +
    `(${budgetAmount(e.kind, e.spent)} spent) · the loop ends (limit)`),
  loop_ended: (e) => ev("notice", `loop ended: ${e.end_reason} after ${e.turns} turn(s)`),
  closing_call: (e) => ev("closing", `closing call: ${e.purpose}${e.turn ? " (turn " + e.turn + ")" : ""} · ${usageText(e.usage)}` + (e.prefill ? ` · reply prefilled with ${JSON.stringify(e.prefill)}` : "") +
    (e.endpoint ? ` · answered by ${e.endpoint}` : ""),
    el("div", { class: "text", text: ((e.message || {}).content) || "(empty reply)" })),
  closing_call_failed: (e) => ev("closing", `closing call ${e.purpose} failed: ${e.reason}`),
  extraction_call: (e) => ev("closing", `page extraction (${e.model}) of ${e.url}` + (e.parts > 1 ? `, part ${e.part} of ${e.parts}` : "") + ` · ${fmtInt(e.page_chars)} chars read · ${usageText(e.usage)}`),
  answer_skipped: (e) => ev("notice", `no answer asked for: ${e.reason}`),
  final_answer: (e) => ev("answer", `final answer · provenance: ${e.provenance}`, el("div", { class: "text", text: e.answer ?? "(none)" })),
  post_mortem: (e) => ev("postmortem", `post-mortem` + (e.failure_type ? ` · failure type: ${e.failure_type}` : "") + (e.prefilled ? " · prefilled" : ""),
    el("div", { class: "text", text: e.text ?? "(none written)" })),
  task_finished: (e) => ev("notice", `finished: ${e.end_reason} · answer: ${e.answer ?? "(none)"} · provenance ${e.provenance} · ${e.turns} turns · ${e.tool_calls} tool calls · ${e.rollbacks} rollbacks · ${usageText(e.usage)} · ${fmtCost(e.cost)}`),
  first_call_skipped: (e) => ev("notice", `first call to ${e.tool} not prefilled: ${e.reason}`),
  tool_server_unavailable: (e) => ev("notice", `tool server ${e.server} unavailable: ${e.reason}`),
};

function renderEvent(e) {
  const render = RENDER[e.event];
  if (render) return render(e);
  const { event, ts, ...rest } = e;
  return ev("notice", event, preBlock(JSON.stringify(rest, null, 1)));
}

// The post-mortems a retry carries: those written by the earlier retries of its attempt.
function carriedInto(journal, journals) {
  if (journal.subagent || !journal.carried_post_mortems) return null;
  const earlier = journals.filter((j) => !j.subagent && j.attempt === journal.attempt && j.retry < journal.retry);
  const texts = earlier.flatMap((j) => j.events.filter((e) => e.event === "post_mortem" && e.text)
    .map((e) => [j.label, e]));
  return ev("postmortem", `this retry carries ${journal.carried_post_mortems} post-mortem(s) from earlier retries`,
    texts.map(([label, e]) => el("div", {}, el("div", { class: "head", text: `from ${label}` +
      (e.failure_type ? ` · failure type: ${e.failure_type}` : "") }), el("div", { class: "text", text: e.text }))));
}

// The address names the open task by its id (positions move as a live run finishes
// tasks). A number that is no task's id names the task at that place in the run,
// counted from 1: report.html#task=12 is the twelfth task.
const taskHash = (task) => `#task=${encodeURIComponent(task.id)}`;
function taskFromHash() {
  const wanted = /^#task=(.+)$/.exec(location.hash);
  if (!wanted) return -1;
  let id;
  try {
    id = decodeURIComponent(wanted[1]);
  } catch {
    return -1; // an address edited by hand into something that is no task
  }
  const found = DATA.tasks.findIndex((t) => t.id === id);
  if (found >= 0 || !/^[1-9][0-9]{0,8}$/.test(id)) return found;
  return Number(id) <= DATA.tasks.length ? Number(id) - 1 : -1;
}

// The task the address names, opened and scrolled into view (on load, and when the
// address changes); an address naming no task of this run says so where it would be.
async function openTaskFromHash() {
  if (DATA.kind !== "run" || !location.hash.startsWith("#task=")) return false;
  const wanted = taskFromHash();
  if (wanted >= 0) {
    await openTask(wanted, { scroll: true });
    return true;
  }
  opening++; // a task still opening must not cover the message, nor stay marked in the table
  for (const tr of document.querySelectorAll("#task-table tbody tr.selected")) tr.classList.remove("selected");
  document.getElementById("trajectory")?.replaceChildren(el("p", { class: "muted",
    text: `The address names a task this run does not have (${location.hash.slice(1)}): click one in the table.` }));
  return false;
}

// Bring the trajectory to the top of the window: at once, and again once the run's
// charts above it are drawn (each grows from its placeholder and pushes it down),
// unless another task was opened meanwhile.
async function scrollToTrajectory(mine) {
  const section = () => document.getElementById("trajectory-section");
  section()?.scrollIntoView({ block: "start" });
  await runChartsDrawn;
  if (mine === opening) section()?.scrollIntoView({ block: "start" });
}

// A failed call: the loop's turn, or a closing call's purpose (the notes' has a turn too).
function callLabel(e) {
  if (!e.purpose) return `turn ${e.turn}`;
  return `${e.purpose} call` + (e.turn == null ? "" : ` (turn ${e.turn})`);
}

let opening = 0; // the newest openTask wins when clicks overtake each other
let runChartsDrawn = Promise.resolve(); // the run's charts, drawn above the trajectory

async function openTask(index, { scroll = false } = {}) {
  const task = DATA.tasks[index];
  if (!task) return;
  const mine = ++opening;
  for (const tr of document.querySelectorAll("#task-table tbody tr.selected")) tr.classList.remove("selected");
  document.querySelector(`#task-table tr[data-index="${index}"]`)?.classList.add("selected");
  const target = document.getElementById("trajectory");
  target.replaceChildren(el("p", { class: "loading", text: `Opening ${task.id}…` }));
  const payload = await unpack(PACKED[index]);
  if (mine !== opening) return;
  const chart = el("div", { class: "chart", id: "chart-task" });
  const header = el("div", { class: "panel" },
    el("h3", {}, `${task.id} `, statusBadge(task.status)),
    kvTable([["question", task.question], ["ground truth", task.ground_truth], ["answer", task.answer],
      ["provenance", task.provenance], ["judgement", task.judgement], ["end reason", task.end_reason],
      ["attempts", task.attempts],
      ...(task.worker_lost > 0 ? [["worker lost", `${fmtInt(task.worker_lost)} time(s): the Ray worker running it died, and it ran again`]] : []),
      ["turns · tool calls", `${fmtInt(task.turns)} · ${fmtInt(task.tool_calls)}`],
      ["tokens", `${fmtInt(task.input_tokens)} in · ${fmtInt(task.output_tokens)} out · ${fmtInt(task.cache_read_tokens)} from cache`
        + (task.extraction_input_tokens ? ` (of which page extraction ${fmtInt(task.extraction_input_tokens)} in · ${fmtInt(task.extraction_output_tokens)} out)` : "")],
      ["cost", fmtCost(task.cost)], ["journals", task.dir]]));
  const journals = payload.journals.map((j) => {
    const start = cycleStart(j.events);
    return el("details", { class: "journal", open: true },
      el("summary", { text: `${j.label} — ${j.events.length} events · ${j.journal}` }),
      el("div", { class: "body" }, carriedInto(j, payload.journals),
        j.events.map((e) => markCycle(renderEvent(e), e, start))));
  });
  const rule = windowNearData(DATA.datasets.window, payload.calls, payload.marks);
  target.replaceChildren(header,
    el("div", { class: "panel", style: "margin-top:12px" }, el("h3", { text: "Prompt tokens per turn" }),
      windowNote(DATA.datasets.window, rule), chart),
    ...(journals.length ? journals : [el("p", { class: "muted", text: "No journal was found for this task." })]));
  if (location.hash !== taskHash(task)) history.replaceState(null, "", taskHash(task));
  if (scroll) scrollToTrajectory(mine);
  await draw(chart, DATA.charts.prompt_task, { calls: payload.calls, marks: payload.marks, window: rule });
}

function renderRun() {
  const run = DATA.run;
  document.getElementById("subtitle").textContent =
    `${run.benchmark} · ${run.state === "finished" ? "finished" : run.state === "running" ? "running" : "stopped before its end"} · ` +
    `report written ${run.generated_at} by deepledger ${run.deepledger_version}`;
  document.getElementById("banners").replaceChildren(...runBanners(run));
  const trajectory = section("trajectory-section", "Trajectory",
    el("div", { id: "trajectory" }, el("p", { class: "muted", text: "Click a task in the table to see its trajectory." })));
  main.replaceChildren(runSection(run), chartsSection(), taskSection(DATA.tasks, (i) => openTask(i, { scroll: true })), trajectory);
  openTaskFromHash().then((opened) => {
    if (!opened && DATA.tasks.length === 1 && !location.hash) openTask(0); // nothing else to choose
  });
}

// -- several runs side by side ---------------------------------------------------------
function renderComparison() {
  document.getElementById("subtitle").textContent =
    `${DATA.runs.length} runs compared · written ${DATA.generated_at} by deepledger ${DATA.deepledger_version}`;
  const problems = DATA.runs.filter((r) => r.problem || r.state !== "finished");
  document.getElementById("banners").replaceChildren(...problems.map((r) =>
    banner(r.problem ? "warn" : "info", `${r.label}: ${r.problem || "not finished: its figures cover the tasks done so far"}`)));
  const head = ["run", "tasks", "accuracy", "pass@k", "input tokens", "cache read", "output tokens", "cost", "turns (mean)", "wall time", "report"];
  const runs = el("table", { id: "runs-table" }, el("thead", {}, el("tr", {}, head.map((h) => el("th", { text: h })))),
    el("tbody", {}, DATA.runs.map((r) => el("tr", {}, el("td", { title: r.dir, text: r.label }),
      el("td", { class: "num", text: `${fmtInt(r.finished)} / ${r.expected ? fmtInt(r.expected) : "?"}` }),
      el("td", { class: "num", text: fmtPct(r.accuracy) }), el("td", { class: "num", text: fmtPct(r.pass_at_k) }),
      el("td", { class: "num", text: fmtTokens(r.input_tokens) }), el("td", { class: "num", text: fmtTokens(r.cache_read_tokens) }),
      el("td", { class: "num", text: fmtTokens(r.output_tokens) }), el("td", { class: "num", text: fmtCost(r.cost) }),
      el("td", { class: "num", text: isNum(r.turns_mean) ? r.turns_mean.toFixed(1) : "–" }),
      el("td", { class: "num", text: fmtSeconds(r.wall_seconds) }),
      el("td", {}, r.report ? el("a", { href: "./" + r.report.split("/").map(encodeURIComponent).join("/"), text: "open" }) : "–")))));
  const charts = el("div", { class: "grid2", style: "margin-top:14px" },
    el("div", { class: "panel" }, el("h3", { text: "Accuracy (pass@1)" }), el("div", { class: "chart", id: "chart-accuracy" })),
    el("div", { class: "panel" }, el("h3", { text: "Cost" }), el("div", { class: "chart", id: "chart-cost" })));
  queueMicrotask(async () => {
    await draw(charts.querySelector("#chart-accuracy"), DATA.charts.accuracy, { runs: DATA.runs.filter((r) => isNum(r.accuracy)) });
    await draw(charts.querySelector("#chart-cost"), DATA.charts.cost, { runs: DATA.runs.filter((r) => isNum(r.cost)) });
  });
  let onlyDiffering = true;
  const body = el("tbody");
  const refresh = () => {
    const rows = DATA.tasks.filter((t) => !onlyDiffering || t.differs);
    body.replaceChildren(...rows.map((t) => el("tr", { title: t.question }, el("td", { class: "clip", text: t.id }),
      t.cells.map((status) => el("td", {}, status ? statusBadge(status) : el("span", { class: "muted", text: "not run" }))))));
    count.textContent = `${rows.length} of ${DATA.tasks.length} tasks`;
  };
  const count = el("span", { class: "count", id: "task-count" });
  const toggle = el("label", {}, el("input", { type: "checkbox", checked: true, id: "only-differing",
    onchange: (e) => { onlyDiffering = e.target.checked; refresh(); } }), " only tasks whose outcome differs between runs");
  const table = el("table", { id: "task-table" }, el("thead", {}, el("tr", {}, el("th", { text: "task" }),
    DATA.runs.map((r) => el("th", { text: r.label, title: r.dir })))), body);
  refresh();
  main.replaceChildren(section("runs", "Runs", el("div", { class: "table-wrap" }, runs), charts),
    section("tasks", "Tasks, run by run", el("div", { class: "filters" }, toggle, count), el("div", { class: "table-wrap" }, table)));
}

if (DATA.kind === "comparison") renderComparison();
else renderRun();
window.addEventListener("hashchange", () => openTaskFromHash());
document.body.dataset.ready = "true";

// -- live: the page as `deepledger view` serves it for a run still going ----------------
// The viewer adds #report-live (where to fetch the run's data again); the static report
// has none and never fetches anything. While the run is live the data is asked for
// again every LIVE_MS (the viewer answers 204 when nothing changed) and the page drawn
// again from it: progress, each task's status, the open task's trajectory.
const LIVE_MS = 1500;
const liveSettings = document.getElementById("report-live");
if (liveSettings && DATA.kind === "run") followLive(JSON.parse(liveSettings.textContent));

function followLive(live) {
  let since = live.signature;
  const home = el("a", { href: live.home, id: "all-runs", text: "all runs" });
  document.getElementById("top").append(el("p", {}, home));
  async function poll() {
    try {
      const reply = await fetch(`${live.data}&since=${encodeURIComponent(since)}`, { cache: "no-store" });
      if (reply.status === 200) {
        const fresh = await reply.json();
        since = fresh.signature;
        // DATA and PACKED are the page's own: refilled in place, then drawn again.
        for (const key of Object.keys(DATA)) delete DATA[key];
        Object.assign(DATA, fresh.data);
        PACKED.splice(0, PACKED.length, ...fresh.packed);
        const y = window.scrollY;
        renderRun();
        window.scrollTo(0, y);
      }
    } catch (error) {
      console.info(`the viewer did not answer: ${error}`);
    }
    document.body.dataset.liveState = DATA.run.state;
    if (DATA.run.state === "running") setTimeout(poll, LIVE_MS);
  }
  document.body.dataset.liveState = DATA.run.state;
  if (DATA.run.state === "running") setTimeout(poll, LIVE_MS);
}
