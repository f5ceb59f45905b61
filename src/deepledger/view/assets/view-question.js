// One `deepledger run` folder: its journal, line by line as the run writes it (server-
// sent events), as text: a model's reply or a tool result may hold anything.
const id = new URLSearchParams(location.search).get("id");
const events = document.getElementById("events");
const state = document.getElementById("state");
document.getElementById("where").textContent = id;
document.getElementById("as-report").href = `run?id=${encodeURIComponent(id)}&as=report`;
let shown = 0;

function text(value) {
  if (value === null || value === undefined) return "";
  if (typeof value === "string") return value;
  if (Array.isArray(value)) return value.map((part) => (part && part.text) || text(part)).join("\n");
  if (value.content !== undefined) return text(value.content);
  return JSON.stringify(value, null, 1);
}
function block(kind, title, content) {
  const node = document.createElement("div");
  node.className = `ev ${kind}`;
  const head = document.createElement("div");
  head.className = "kind";
  head.textContent = title;
  node.append(head);
  if (content) node.append(Object.assign(document.createElement("pre"), { textContent: content }));
  return node;
}
function render(line) {
  const turn = line.turn !== undefined ? ` · turn ${line.turn}` : "";
  switch (line.event) {
    case "task_started":
      document.getElementById("question").textContent = line.task;
      return null;
    case "assistant": {
      const calls = (line.message && line.message.tool_calls) || [];
      const said = [text(line.message), ...calls.map((c) => `→ ${c.name} ${JSON.stringify(c.arguments)}`)].filter(Boolean);
      return block("assistant", `assistant${turn}`, said.join("\n"));
    }
    case "tool_results":
      return block("tool_results", `tool results${turn}`, (line.results || []).map((r) => text(r)).join("\n---\n"));
    case "final_answer":
      return block("final_answer", `final answer (${line.provenance})`, line.answer ?? "(none)");
    case "task_finished":
      return block("task_finished", `finished: ${line.end_reason} after ${line.turns} turns, ${line.tool_calls} tool calls`, null);
    case "llm_call":
      return null;  // its usage is in the run's totals; the reply follows as `assistant`
    default:
      return block("other", `${line.event}${turn}`, null);
  }
}

const source = new EventSource(`api/run/events?id=${encodeURIComponent(id)}`);
source.addEventListener("status", (message) => {
  state.textContent = message.data;
  state.className = `status ${message.data}`;
});
source.addEventListener("line", (message) => {
  const node = render(JSON.parse(message.data));
  if (node) { events.append(node); shown += 1; }
  document.getElementById("count").textContent = `(${shown})`;
});
source.addEventListener("end", (message) => {
  const end = JSON.parse(message.data);
  state.textContent = end.status;
  state.className = `status ${end.status}`;
  if (end.detail) events.append(block("other", "the run said", end.detail));
  source.close();
});
document.body.dataset.ready = "true";
