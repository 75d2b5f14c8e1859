"""The agora pages' one script and one style sheet, served by the app (behind the same login).

The pages carry no inline script or style, so the Content-Security-Policy allows scripts and
styles from the app alone. The script does three things with the JSON API: the re-optimize
buttons POST ``/api/dags/{dag_id}/reoptimize`` (JSON, with the page's CSRF token in the
``X-Agora-CSRF`` header); the Pareto box polls ``/api/dags/{dag_id}/pareto`` until the
front is computed, then shows ``pareto.svg``; and, for a user with edit rights on the DAG (the
box then has ``data-apply``), it lists the front's points, each with a button that POSTs
``/api/dags/{dag_id}/pareto/{index}/apply`` with the plan version the front was read for.
Text from the server is set with ``textContent``, never as markup.
"""

from __future__ import annotations

SCRIPT = r"""
"use strict";
(function () {
  function csrfToken() {
    const meta = document.querySelector('meta[name="agora-csrf"]');
    return meta ? meta.content : "";
  }

  async function postJson(url, body) {
    const answer = await fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: {"Content-Type": "application/json", "X-Agora-CSRF": csrfToken()},
      body: JSON.stringify(body),
    });
    const reply = await answer.json().catch(() => ({}));
    const detail = typeof reply.detail === "string" ? reply.detail : answer.statusText;
    return {ok: answer.ok, code: answer.status, reply, detail};
  }

  async function reoptimize(button) {
    const status = document.getElementById(button.dataset.status);
    button.disabled = true;
    status.textContent = "queuing...";
    try {
      const {ok, code, reply, detail} = await postJson(button.dataset.url, {});
      if (ok) {
        const what = reply.already_queued ? "already queued" : "queued";
        status.textContent = `${what}: ${reply.rerun_dag_id} run ${reply.run_id}`;
        status.dataset.state = "queued";
      } else {
        status.textContent = `refused (${code}): ${detail}`;
        status.dataset.state = "refused";
      }
    } catch (error) {
      status.textContent = `failed: ${error}`;
      status.dataset.state = "failed";
    } finally {
      button.disabled = false;
    }
  }

  async function applyPoint(box, version, point, button, status) {
    box.querySelectorAll("button[data-point]").forEach((b) => { b.disabled = true; });
    status.textContent = "applying...";
    try {
      const url = `${box.dataset.apply}/${point.index}/apply`;
      const {ok, code, reply, detail} = await postJson(url, {plan_version: version});
      if (ok) {
        status.textContent = `in force: ${reply.objective} plan, makespan ${reply.makespan_s.toFixed(1)} s, ` +
          `cost ${reply.cost_usd.toFixed(4)} USD; reload the page to see it`;
        status.dataset.state = "applied";
        return;
      }
      status.textContent = `refused (${code}): ${detail}`;
      status.dataset.state = "refused";
    } catch (error) {
      status.textContent = `failed: ${error}`;
      status.dataset.state = "failed";
    }
    box.querySelectorAll("button[data-point]").forEach((b) => { b.disabled = false; });
  }

  function listPoints(box, state) {
    const list = document.createElement("ol");
    list.id = "pareto-points";
    list.start = 0;
    state.points.forEach((point) => {
      const item = document.createElement("li");
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = "apply";
      button.dataset.point = String(point.index);
      const label = document.createElement("span");
      const numbers = `makespan ${point.makespan_s.toFixed(1)} s, cost ${point.cost_usd.toFixed(4)} USD`;
      label.textContent = ` ${point.label}: ${numbers} `;
      const status = document.createElement("span");
      status.className = "status";
      button.addEventListener("click", () => applyPoint(box, state.plan_version, point, button, status));
      item.append(button, label, status);
      list.append(item);
    });
    box.append(list);
  }

  async function showPareto(box) {
    const note = box.querySelector(".note");
    try {
      const answer = await fetch(box.dataset.state, {credentials: "same-origin"});
      const state = await answer.json();
      if (state.status === "computing") {
        note.textContent = `computing the front (up to ${state.time_limit_s} s)...`;
        window.setTimeout(() => showPareto(box), 1500);
        return;
      }
      if (state.status !== "ready") {
        note.textContent = `no front: ${state.reason}`;
        return;
      }
      const svg = await (await fetch(box.dataset.svg, {credentials: "same-origin"})).text();
      const chart = new DOMParser().parseFromString(svg, "image/svg+xml").documentElement;
      box.replaceChildren(document.importNode(chart, true));
      if (box.dataset.apply && state.points.length) {
        listPoints(box, state);
      }
    } catch (error) {
      note.textContent = `no front: ${error}`;
    }
  }

  document.querySelectorAll("button[data-reoptimize]").forEach((button) => {
    button.addEventListener("click", () => reoptimize(button));
  });
  document.querySelectorAll("[data-pareto]").forEach(showPareto);
})();
"""

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1rem 1.5rem; color: #1a202c; background: #fff; }
nav a { margin-right: 1rem; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.15rem; margin-top: 1.6rem; }
table { border-collapse: collapse; font-size: 0.85rem; }
th, td { border-bottom: 1px solid #e2e8f0; padding: 0.25rem 0.6rem; text-align: left; vertical-align: top; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.saving { color: #276749; } .loss { color: #9b2c2c; } .muted { color: #718096; }
.pager { margin: 0.5rem 0; } .pager a, .pager span { margin-right: 0.8rem; }
.chart { max-width: 100%; height: auto; border: 1px solid #e2e8f0; }
.pareto-box { min-height: 3rem; }
button[data-reoptimize] { padding: 0.2rem 0.7rem; cursor: pointer; }
form.filters input, form.filters select { margin-right: 0.6rem; }
.error { color: #9b2c2c; }
td.off { color: #9b2c2c; background: #fff5f5; font-weight: 600; }
tr.selected td { background: #f7fafc; }
a.runs-link { margin-left: 0.5rem; font-size: 0.8rem; }
"""
