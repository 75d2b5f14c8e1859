"""The agora view in the Airflow UI: plans, Gantt charts, Pareto fronts and savings, behind Airflow's login.

The plugin (:mod:`agora_optimizer.plugin`) mounts the FastAPI app of
:func:`agora_optimizer.ui.app.create_app` at ``/agora`` in Airflow's api-server and adds an
"agora" entry to Airflow's navigation (and an "agora plan" tab on every DAG) that shows it.

- :mod:`.auth`: every route needs Airflow's own login (its JWT, as a Bearer header or the
  ``_token`` cookie of Airflow's UI) and the auth manager's rights on the DAG it shows;
- :mod:`.api` and :mod:`.views`: the JSON API (in the app's OpenAPI schema) and the HTML pages;
- :mod:`.plans`, :mod:`.traces`, :mod:`.baseline`: what the pages show, read from the plan
  store, the trace store and Airflow's serialized DAGs, paginated and cached;
- :mod:`.svg`: the Gantt chart and the Pareto plot, drawn on the server as escaped SVG;
- :mod:`.pages` and :mod:`.assets`: the HTML templates (autoescaped), the script and the style.
"""
