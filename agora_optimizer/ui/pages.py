"""The agora pages as Jinja2 templates, with autoescape on: every name is escaped where it is shown.

The only markup inserted unescaped is the SVG of :mod:`agora_optimizer.ui.svg`, which
escapes every name itself (``Markup`` marks it). Templates live here as strings, so the
package needs no data files.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from jinja2 import DictLoader, Environment, StrictUndefined, select_autoescape
from markupsafe import Markup

BASE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="agora-csrf" content="{{ csrf }}">
<title>{% block title %}agora{% endblock %}</title>
<link rel="stylesheet" href="{{ base }}/assets/agora.css">
<script src="{{ base }}/assets/agora.js" defer></script>
</head>
<body>
<nav><a href="{{ base }}/">Plans</a><a href="{{ base }}/platform">Platform</a><a href="{{ base }}/traces">Traces</a>
<span class="muted">signed in as {{ user_name }}</span></nav>
{% block body %}{% endblock %}
</body>
</html>
"""

MACROS = """
{% macro seconds(value) %}{{ "{:,.1f}".format(value) if value is not none else "-" }}{% endmacro %}
{% macro usd(value) %}{{ "{:,.4f}".format(value) if value is not none else "-" }}{% endmacro %}
{% macro mib(value) %}{{ "{:,.0f}".format(value / 1048576) if value is not none else "-" }}{% endmacro %}
{% macro saving(value) -%}
{% if value is none %}<span class="muted">-</span>
{% else %}<span class="{{ 'saving' if value >= 0 else 'loss' }}">{{ "{:+.1%}".format(value) }}</span>{% endif %}
{%- endmacro %}
{% macro ratio(value, off) -%}
{% if value is none %}<td class="num ratio muted">-</td>
{% else %}<td class="num ratio{{ ' off' if off }}" data-off="{{ 'true' if off else 'false' }}"
 title="actual / planned">{{ "{:.2f}".format(value) }}</td>{% endif %}
{%- endmacro %}
{% macro reoptimize(base, dag) -%}
<button type="button" data-reoptimize data-url="{{ base }}/api/dags/{{ dag | urlencode }}/reoptimize"
 data-status="status-{{ dag }}" id="reoptimize-{{ dag }}">Re-optimize</button>
<span role="status" class="muted" id="status-{{ dag }}"></span>
{%- endmacro %}
{% macro pager(page_url, offset, limit, total) -%}
<div class="pager">
{% if total %}<span>{{ offset + 1 }}-{{ [offset + limit, total] | min }} of {{ total }}</span>{% else %}
<span>none</span>{% endif %}
{% if offset > 0 %}<a rel="prev" href="{{ page_url([offset - limit, 0] | max) }}">previous</a>{% endif %}
{% if offset + limit < total %}<a rel="next" href="{{ page_url(offset + limit) }}">next</a>{% endif %}
</div>
{%- endmacro %}
"""

INDEX = """{% extends "base.html" %}{% import "macros.html" as m %}
{% block title %}agora: plans{% endblock %}
{% block body %}
<h1>agora plans</h1>
<p class="muted">Every DAG you may read that has a plan in force. Savings are against the one-type default
(every task on the cheapest resource type that fits them all).</p>
<table id="dags">
<thead><tr><th>DAG</th><th>objective</th><th class="num">tasks</th><th class="num">machines</th>
<th class="num">makespan (s)</th><th class="num">cost (USD)</th><th class="num">makespan saving</th>
<th class="num">cost saving</th><th>planned</th><th></th></tr></thead>
<tbody>
{% for dag in dags %}
<tr data-dag-id="{{ dag.dag_id }}">
<td><a href="{{ base }}/dags/{{ dag.dag_id | urlencode }}">{{ dag.dag_id }}</a>
<a class="runs-link muted" href="{{ base }}/dags/{{ dag.dag_id | urlencode }}/runs">plan vs actual</a></td>
<td>{{ dag.objective }}</td><td class="num">{{ dag.tasks }}</td><td class="num">{{ dag.machines }}</td>
<td class="num">{{ m.seconds(dag.makespan_s) }}</td><td class="num">{{ m.usd(dag.cost_usd) }}</td>
{% if dag.savings.available %}
<td class="num">{{ m.saving(dag.savings.makespan_saving) }}</td>
<td class="num">{{ m.saving(dag.savings.cost_saving) }}</td>
{% else %}<td colspan="2" class="muted">{{ dag.savings.reason }}</td>{% endif %}
<td>{{ dag.plan_created_at }}</td>
<td>{% if dag.can_reoptimize %}{{ m.reoptimize(base, dag.dag_id) }}{% endif %}</td>
</tr>
{% else %}
<tr><td colspan="10" class="muted">No plan of a DAG you may read. Plan one with
<code>agora optimize airflow:DAG_ID --apply</code> or the agora_reoptimize DAG.</td></tr>
{% endfor %}
</tbody>
</table>
<p><a id="platform-link" href="{{ base }}/platform">The platform's window</a>
<span class="muted">(many DAG runs planned together, when one is in force)</span></p>
{% endblock %}
"""

DAG = """{% extends "base.html" %}{% import "macros.html" as m %}
{% block title %}agora: {{ dag_id }}{% endblock %}
{% block body %}
<h1>Plan of <span id="dag-id">{{ dag_id }}</span></h1>
{% if can_reoptimize %}<p>{{ m.reoptimize(base, dag_id) }}</p>{% endif %}
<p><a id="runs-link" href="{{ base }}/dags/{{ dag_id | urlencode }}/runs">Plan vs actual: the recorded runs</a></p>
{% if summary is none %}
<p>This DAG has no plan yet.{% if can_reoptimize %} Re-optimize it to make one.{% endif %}</p>
{% else %}
<table id="summary">
<tr><th>objective</th><td>{{ summary.objective }}</td><th>planned</th><td>{{ summary.plan_created_at }}</td></tr>
<tr><th>makespan</th><td>{{ m.seconds(summary.makespan_s) }} s</td>
<th>cost</th><td>{{ m.usd(summary.cost_usd) }} USD</td></tr>
<tr><th>solver</th><td>{{ summary.method }} ({{ summary.solver_status }})</td>
<th>tasks / machines</th><td>{{ summary.tasks }} / {{ summary.machines }}</td></tr>
{% if summary.savings.available %}
<tr><th>one-type default</th><td>{{ summary.savings.default_resource }}:
{{ m.seconds(summary.savings.default_makespan_s) }} s,
{{ m.usd(summary.savings.default_cost_usd) }} USD</td>
<th>savings</th><td>makespan {{ m.saving(summary.savings.makespan_saving) }},
cost {{ m.saving(summary.savings.cost_saving) }}</td></tr>
{% else %}<tr><th>one-type default</th><td colspan="3" class="muted">{{ summary.savings.reason }}</td></tr>{% endif %}
</table>

<h2>Gantt chart</h2>
<p class="muted">One row per machine, tasks coloured by resource type.</p>
{{ gantt_svg }}
{% if gantt.pages > 1 %}<div class="pager">
<span>machines page {{ gantt.page + 1 }} of {{ gantt.pages }} ({{ gantt.machines }} machines)</span>
{% if gantt.page > 0 %}<a href="{{ dag_url(machine_page=gantt.page - 1) }}">previous machines</a>{% endif %}
{% if gantt.page + 1 < gantt.pages %}<a href="{{ dag_url(machine_page=gantt.page + 1) }}">next machines</a>{% endif %}
</div>{% endif %}

<h2>Cost / makespan Pareto front</h2>
{% if can_reoptimize %}<p class="muted">Each point of the front is a plan: apply one to put it in force
for the next runs.</p>{% endif %}
<div class="pareto-box" id="pareto" data-pareto data-state="{{ base }}/api/dags/{{ dag_id | urlencode }}/pareto"
 data-svg="{{ base }}/dags/{{ dag_id | urlencode }}/pareto.svg"
{%- if can_reoptimize %} data-apply="{{ base }}/api/dags/{{ dag_id | urlencode }}/pareto"{% endif %}>
{% if pareto_svg %}{{ pareto_svg }}{% else %}<p class="note muted">loading the front...</p>{% endif %}
</div>

<h2>Tasks: predicted against actual</h2>
<p class="muted">Predicted: the plan's runtime on its resource and the memory it reserves. Actual: the successful
attempts of each task in the {{ tasks.recent_runs | length }} most recent runs in the trace store.</p>
{% if tasks.trace_store_error %}<p class="error">{{ tasks.trace_store_error }}</p>{% endif %}
<form class="filters" method="get" action="{{ base }}/dags/{{ dag_id | urlencode }}">
<input name="task" placeholder="task name contains" value="{{ task_filter or '' }}"><button>filter</button></form>
{{ m.pager(tasks_url, tasks.offset, tasks.limit, tasks.total) }}
<table id="tasks">
<thead><tr><th>task</th><th>resource</th><th>machine</th><th class="num">start (s)</th>
<th class="num">predicted (s)</th><th class="num">actual mean (s)</th><th class="num">actual max (s)</th>
<th class="num">reserved (MiB)</th><th class="num">actual peak (MiB)</th><th class="num">runs</th>
<th>ran on</th></tr></thead>
<tbody>
{% for t in tasks.tasks %}
<tr><td>{{ t.task }}</td><td>{{ t.resource }}</td><td>{{ t.machine }}</td>
<td class="num">{{ m.seconds(t.start_s) }}</td>
<td class="num">{{ m.seconds(t.predicted_runtime_s) }}</td><td class="num">{{ m.seconds(t.actual_mean_runtime_s) }}</td>
<td class="num">{{ m.seconds(t.actual_max_runtime_s) }}</td><td class="num">{{ m.mib(t.predicted_memory_bytes) }}</td>
<td class="num">{{ m.mib(t.actual_max_peak_rss_bytes) }}</td>
<td class="num">{{ t.runs }}{% if t.failed %} (+{{ t.failed }} failed){% endif %}</td>
<td>{{ t.ran_on | join(", ") }}</td></tr>
{% endfor %}
</tbody>
</table>
{{ m.pager(tasks_url, tasks.offset, tasks.limit, tasks.total) }}
{% endif %}

<h2>Plan history</h2>
<table id="history">
<thead><tr><th>put in force</th><th>planned</th><th>objective</th><th>solver</th><th class="num">tasks</th>
<th class="num">makespan (s)</th><th class="num">cost (USD)</th><th></th></tr></thead>
<tbody>
{% for h in history.plans %}
<tr><td>{{ h.applied_at or "-" }}</td><td>{{ h.created_at }}</td>
<td>{{ h.objective }}</td><td>{{ h.method }} ({{ h.solver_status }})</td>
<td class="num">{{ h.tasks }}</td><td class="num">{{ m.seconds(h.makespan_s) }}</td>
<td class="num">{{ m.usd(h.cost_usd) }}</td>
<td>{% if h.current %}in force{% endif %}</td></tr>
{% else %}<tr><td colspan="8" class="muted">no plan yet</td></tr>
{% endfor %}
</tbody>
</table>
{% if history.total > history.plans | length %}<p class="muted">{{ history.total }} plans in all; the
{{ history.plans | length }} newest are shown.</p>{% endif %}
<p><a href="{{ base }}/traces?dag_id={{ dag_id | urlencode }}">Traces of {{ dag_id }}</a></p>
{% endblock %}
"""

RUNS = """{% extends "base.html" %}{% import "macros.html" as m %}
{% block title %}agora: {{ dag_id }}, plan vs actual{% endblock %}
{% block body %}
<h1>Plan vs actual: <span id="dag-id">{{ dag_id }}</span></h1>
<p><a href="{{ base }}/dags/{{ dag_id | urlencode }}">Plan of {{ dag_id }}</a></p>
{% if not page.runs %}
<p id="no-runs">No recorded runs yet. Every run of this DAG that ends is recorded: agora's DAG-run listener
(in Airflow's scheduler) writes its run record to the trace store. Runs that ended before the agora plugin
was installed are recorded with <code>agora runs record --dag {{ dag_id }}</code>.</p>
{% else %}
{% set s = page.saving %}
<h2>Realised saving</h2>
<p class="muted">The median of the successful planned runs shown against the median of the successful unplanned
runs (default placement) of this DAG, beside the saving the plan predicted against its one-type default.</p>
<table id="saving">
<thead><tr><th></th><th class="num">runs</th><th class="num">median makespan (s)</th>
<th class="num">median cost (USD)</th></tr></thead>
<tbody>
<tr><th>planned</th><td class="num">{{ s.planned_runs }}</td>
<td class="num">{{ m.seconds(s.planned_median_makespan_s) }}</td>
<td class="num">{{ m.usd(s.planned_median_cost_usd) }}</td></tr>
<tr><th>unplanned</th><td class="num">{{ s.unplanned_runs }}</td>
<td class="num">{{ m.seconds(s.unplanned_median_makespan_s) }}</td>
<td class="num">{{ m.usd(s.unplanned_median_cost_usd) }}</td></tr>
<tr id="realised"><th>realised saving</th>
{% if s.available %}<td></td><td class="num">{{ m.saving(s.makespan_saving) }}</td>
<td class="num">{{ m.saving(s.cost_saving) }}</td>
{% else %}<td colspan="3" class="muted">{{ s.reason }}</td>{% endif %}</tr>
<tr id="predicted"><th>predicted saving
{%- if s.predicted_plan_version %} (plan {{ s.predicted_plan_version }}){% endif %}</th>
{% if s.predicted is not none and s.predicted.available %}<td></td>
<td class="num">{{ m.saving(s.predicted.makespan_saving) }}</td>
<td class="num">{{ m.saving(s.predicted.cost_saving) }}</td>
{% elif s.predicted is not none %}<td colspan="3" class="muted">{{ s.predicted.reason }}</td>
{% else %}<td colspan="3" class="muted">no plan of this DAG to predict with</td>{% endif %}</tr>
</tbody>
</table>

<h2>The last {{ page.runs | length }} runs</h2>
<form class="filters" method="get" action="{{ base }}/dags/{{ dag_id | urlencode }}/runs">
<label>runs shown <input name="limit" type="number" min="1" max="200" value="{{ page.limit }}"></label>
<button>show</button></form>
<p class="muted">Ratios are actual / planned; those more than {{ "{:.0%}".format(page.off_threshold) }} off
are marked.</p>
<table id="runs">
<thead><tr><th>run</th><th>state</th><th>planned</th><th>plan</th><th>started (UTC)</th>
<th class="num">planned makespan (s)</th><th class="num">actual makespan (s)</th><th class="num">ratio</th>
<th class="num">planned cost (USD)</th><th class="num">actual cost (USD)</th><th class="num">ratio</th>
<th class="num">repairs</th></tr></thead>
<tbody>
{% for r in page.runs %}
<tr data-run-id="{{ r.run_id }}"
{%- if page.selected and r.run_id == page.selected.run.run_id %} class="selected"{% endif %}>
<td><a href="{{ runs_url(run_id=r.run_id) }}">{{ r.run_id }}</a></td><td>{{ r.state }}</td>
<td>{{ "yes" if r.planned else "no" }}</td><td>{{ r.plan_version or "-" }}</td>
<td>{{ r.started_at.strftime("%Y-%m-%d %H:%M:%S") if r.started_at else "-" }}</td>
<td class="num">{{ m.seconds(r.planned_makespan_s) }}</td><td class="num">{{ m.seconds(r.actual_makespan_s) }}</td>
{{ m.ratio(r.makespan_ratio, r.makespan_off) }}
<td class="num">{{ m.usd(r.planned_cost_usd) }}
{%- if r.planned_expected_cost_usd is not none %}<br><small class="expected"
title="expected with its spot tasks' interruptions">expected {{ m.usd(r.planned_expected_cost_usd) }}</small>
{%- endif %}</td><td class="num">{{ m.usd(r.actual_cost_usd) }}</td>
{{ m.ratio(r.cost_ratio, r.cost_off) }}
<td class="num">{{ r.repairs }}</td></tr>
{% endfor %}
</tbody>
</table>

{% set d = page.selected %}
<h2>Run <span id="run-id">{{ d.run.run_id }}</span></h2>
<p class="muted">{{ d.tasks }} tasks on {{ d.machines }} machines. Per machine, each task's planned slot (hatched)
above its actual run (green: success, red: failed), in seconds from the DAG run's start.</p>
{% if d.forecast %}<p id="forecast">Forecast at {{ m.seconds(d.forecast.at_s) }} s: ends at
{{ m.seconds(d.forecast.end_s) }} s
{%- if d.forecast.end_at %} ({{ d.forecast.end_at.strftime("%Y-%m-%d %H:%M:%S") }} UTC){% endif %},
costs {{ m.usd(d.forecast.cost_usd) }} USD.</p>{% endif %}
{{ gantt_svg }}
{% if gantt.pages > 1 %}<div class="pager">
<span>machines page {{ gantt.page + 1 }} of {{ gantt.pages }} ({{ gantt.machines }} machines)</span>
{% if gantt.page > 0 %}<a href="{{ run_url(machine_page=gantt.page - 1) }}">previous machines</a>{% endif %}
{% if gantt.page + 1 < gantt.pages %}<a href="{{ run_url(machine_page=gantt.page + 1) }}">next machines</a>{% endif %}
</div>{% endif %}
<h3>Notes</h3>
<ul id="notes">
{% for note in d.notes %}<li>{{ note }}</li>{% else %}<li class="muted">none</li>{% endfor %}
</ul>
<h3>Repairs</h3>
<table id="repairs">
<thead><tr><th class="num">at (s)</th><th>reason</th><th>tasks</th><th>detail</th></tr></thead>
<tbody>
{% for r in d.repairs %}
<tr><td class="num">{{ m.seconds(r.at_s) }}</td><td>{{ r.reason }}</td><td>{{ r.tasks | join(", ") }}</td>
<td>{{ r.detail }}</td></tr>
{% else %}<tr><td colspan="4" class="muted">none</td></tr>
{% endfor %}
</tbody>
</table>
{% endif %}
{% endblock %}
"""

TRACES = """{% extends "base.html" %}{% import "macros.html" as m %}
{% block title %}agora: traces{% endblock %}
{% block body %}
<h1>Task attempts</h1>
<form class="filters" method="get" action="{{ base }}/traces">
<select name="dag_id"><option value="">any DAG</option>
{% for dag in dag_ids %}<option value="{{ dag }}"{% if dag == filters.dag_id %} selected{% endif %}>{{ dag }}</option>
{% endfor %}</select>
<input name="task_id" placeholder="task id" value="{{ filters.task_id or '' }}">
<select name="state"><option value="">any state</option>
{% for s in states %}<option{% if s == filters.state %} selected{% endif %}>{{ s }}</option>{% endfor %}</select>
<input name="resource_type" placeholder="resource type" value="{{ filters.resource_type or '' }}">
<button>filter</button>
</form>
{{ m.pager(page_url, page.offset, page.limit, page.total) }}
<table id="traces">
<thead><tr><th>DAG</th><th>task</th><th>run</th><th class="num">try</th><th>state</th><th>resource</th>
<th>host</th><th>started (UTC)</th><th class="num">runtime (s)</th><th class="num">peak (MiB)</th>
<th>error</th></tr></thead>
<tbody>
{% for a in page.attempts %}
<tr><td>{{ a.dag_id }}</td><td>{{ a.task_id }}{% if a.map_index >= 0 %}[{{ a.map_index }}]{% endif %}</td>
<td>{{ a.run_id }}</td><td class="num">{{ a.try_number }}</td><td>{{ a.state }}</td><td>{{ a.resource_type }}</td>
<td>{{ a.host }}</td><td>{{ a.started_at.strftime("%Y-%m-%d %H:%M:%S") if a.started_at else "-" }}</td>
<td class="num">{{ m.seconds(a.runtime_s) }}</td><td class="num">{{ m.mib(a.peak_rss_bytes) }}</td>
<td>{{ a.error_text | truncate(200) }}</td></tr>
{% else %}<tr><td colspan="11" class="muted">no attempt matches</td></tr>
{% endfor %}
</tbody>
</table>
{{ m.pager(page_url, page.offset, page.limit, page.total) }}
{% endblock %}
"""

PLATFORM = """{% extends "base.html" %}{% import "macros.html" as m %}
{% block title %}agora: the platform's window{% endblock %}
{% block body %}
<h1>The platform's window</h1>
<p class="muted">The last window of many DAG runs planned together and put in force
(<code>agora optimize --dags ... --window ... --apply</code>, {{ window.created_at }}): from {{ window.start }}
for {{ m.seconds(window.length_s) }} s on {{ window.catalog }}. Each run leases machines of its own; a type's
count is shared by all runs at every instant. Machines below are the platform's: a row is one machine of a type
over the window, each bar a task at its time in the window.</p>
{% if window.ways %}
<table id="ways">
<thead><tr><th>planned</th><th class="num">cost (USD)</th><th class="num">cost / lower bound</th>
<th>late runs</th><th>over the counts</th></tr></thead>
<tbody>
{% for name, way in window.ways.items() %}
<tr data-way="{{ name }}"><td>{{ name }}</td><td class="num">{{ m.usd(way.cost_usd) }}</td>
<td class="num">{% if window.cost_lower_bound_usd > 0 %}
{{- "%.3f" | format(way.cost_usd / window.cost_lower_bound_usd) }}
{%- endif %}</td>
<td>{{ way.late_runs | length }}</td>
<td>{% for kind, peak in way.over_counts.items() %}{{ kind }}: {{ peak }} at once {% else %}none{% endfor %}</td></tr>
{% endfor %}
</tbody>
</table>
{% endif %}
{{ gantt_svg }}
{% if gantt.pages > 1 %}<div class="pager">
<span>machines page {{ gantt.page + 1 }} of {{ gantt.pages }} ({{ gantt.machines }} machines)</span>
{% if gantt.page > 0 %}<a href="{{ page_url(machine_page=gantt.page - 1) }}">previous machines</a>{% endif %}
{% if gantt.page + 1 < gantt.pages %}<a href="{{ page_url(machine_page=gantt.page + 1) }}">next machines</a>{% endif %}
</div>{% endif %}
<table id="window-runs">
<thead><tr><th>run</th><th class="num">starts (s)</th><th class="num">deadline (s)</th>
<th class="num">makespan (s)</th><th class="num">cost (USD)</th><th>on time</th></tr></thead>
<tbody>
{% for run in window.runs %}
<tr data-run="{{ run.run }}"><td><a href="{{ base }}/dags/{{ run.dag_id | urlencode }}">{{ run.run }}</a></td>
<td class="num">{{ m.seconds(run.offset_s) }}</td>
<td class="num">{% if run.deadline_s is not none %}{{ m.seconds(run.deadline_s) }}{% else %}none{% endif %}</td>
<td class="num">{{ m.seconds(run.makespan_s) }}</td><td class="num">{{ m.usd(run.cost_usd) }}</td>
<td>{{ "yes" if run.on_time else "no" }}</td></tr>
{% endfor %}
</tbody>
</table>
{% if window.hidden_runs %}<p class="muted">{{ window.hidden_runs }} more runs of DAGs you may not read.</p>{% endif %}
{% endblock %}
"""

ERROR = """<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>agora: {{ status_code }}</title></head>
<body>
<h1>{{ status_code }}</h1>
<p>{{ detail }}</p>
{% if login_url %}<p><a href="{{ login_url }}" target="_top">Log in to Airflow</a></p>{% endif %}
</body>
</html>
"""

TEMPLATES = {
    "base.html": BASE,
    "macros.html": MACROS,
    "index.html": INDEX,
    "dag.html": DAG,
    "runs.html": RUNS,
    "traces.html": TRACES,
    "platform.html": PLATFORM,
    "error.html": ERROR,
}


@cache
def environment() -> Environment:
    return Environment(
        loader=DictLoader(TEMPLATES),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(**context)


def trusted_svg(svg: str) -> Markup:
    """SVG from :mod:`agora_optimizer.ui.svg`, which escaped every name it holds."""
    return Markup(svg)  # built by svg.py, every name escaped there
