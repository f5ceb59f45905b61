// The list of runs under the logs folder, read again every few seconds (more often
// while a run is live), and the form that starts a question. Every text from a run goes
// into the page as text, never as markup.
const body = document.querySelector("#runs tbody");
const isNum = (v) => typeof v === "number" && Number.isFinite(v);
const pct = (v) => (isNum(v) ? `${(100 * v).toFixed(1)}%` : "–");
const cost = (v) => (isNum(v) ? `$${v < 1 ? v.toFixed(4) : v.toFixed(2)}` : "–");
const tokens = (v) => (!isNum(v) ? "–" : v >= 1e6 ? `${(v / 1e6).toFixed(2)}M` : v >= 1e4 ? `${(v / 1e3).toFixed(1)}k` : String(v));
function td(text, cls) { const c = document.createElement("td"); c.textContent = text ?? "–"; if (cls) c.className = cls; return c; }

function row(run) {
  const tr = document.createElement("tr");
  tr.dataset.id = run.id;
  tr.dataset.status = run.status;
  const badge = document.createElement("span");
  badge.className = `status ${run.status}`;
  badge.textContent = run.status;
  const first = document.createElement("td");
  first.append(badge);
  const link = document.createElement("a");
  link.href = `run?id=${encodeURIComponent(run.id)}`;
  link.textContent = run.id;
  const folder = document.createElement("td");
  folder.append(link);
  if (run.problem) folder.append(Object.assign(document.createElement("div"), { className: "err", textContent: run.problem }));
  const suite = run.kind === "run" ? `question: ${(run.question || "").slice(0, 80)}` : run.suite;
  const done = isNum(run.done) ? `${run.done} / ${isNum(run.expected) ? run.expected : "?"}` : "–";
  tr.append(first, td(suite), td(run.model), td(done, "num"), td(pct(run.accuracy), "num"),
    td(tokens(run.tokens), "num"), td(cost(run.cost), "num"), td(run.started), folder);
  return tr;
}

async function refresh() {
  let live = false;
  try {
    const answer = await (await fetch("api/runs", { cache: "no-store" })).json();
    document.getElementById("where").textContent = `${answer.logs} · read ${new Date().toLocaleTimeString()}`;
    body.replaceChildren(...answer.runs.map(row));
    document.getElementById("count").textContent = `(${answer.runs.length})`;
    live = answer.runs.some((r) => r.status === "running");
    if (!answer.questions) {
      document.getElementById("ask-button").disabled = true;
      document.getElementById("ask-note").textContent = answer.questions_refused;
    }
  } catch (error) {
    document.getElementById("where").textContent = `the viewer is not answering (${error})`;
  }
  document.body.dataset.ready = "true";
  setTimeout(refresh, live ? 1500 : 5000);
}

document.getElementById("ask-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const note = document.getElementById("ask-note");
  note.className = "muted";
  note.textContent = "Starting…";
  const reply = await fetch("api/questions", {
    method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ question: document.getElementById("question").value,
      overrides: document.getElementById("overrides").value }),
  });
  const answer = await reply.json();
  if (!reply.ok) { note.className = "err"; note.textContent = answer.error; return; }
  location.href = answer.url;
});
refresh();
