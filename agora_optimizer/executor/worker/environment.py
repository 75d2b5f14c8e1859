"""Which of the scheduler's environment variables a job must never get, on any backend.

A task talks to Airflow through the Execution API with its own token: it needs neither the
metadata database nor the keys that sign tokens and sessions or decrypt connections, nor the
Celery broker. Those settings are secrets of the scheduler, and a job's environment is kept
by others (SLURM stores it with the job, DescribeJobs shows a Batch job's to anyone allowed to
call it). They are recognised by meaning, not by a list of spellings: every environment name
that Airflow resolves to one of :data:`SCHEDULER_SECRETS` is one, so also

- the deprecated names Airflow still honours for them (``[core] sql_alchemy_conn`` for
  ``[database] sql_alchemy_conn``, ``[webserver] secret_key`` for ``[api] secret_key``: Airflow's
  ``deprecated_options`` and ``deprecated_sections``),
- their ``_CMD`` and ``_SECRET`` variants (a command or a secrets-backend path that yields the
  value),
- their team-scoped spellings ``AIRFLOW__<TEAM>___<SECTION>__<KEY>`` (and those variants).

:func:`job_environment` is the one filter: the executor applies it to what it passes to a job,
and every backend (local, SLURM, AWS Batch) applies it again to what it hands to a process or
a cluster, so no path around the executor carries a secret to a job.
"""

from __future__ import annotations

import fnmatch
import functools
from collections.abc import Mapping

ENV_PREFIX = "AIRFLOW__"
# The scheduler's secrets no task needs, as (section, option) of Airflow's config; "*": every option.
SCHEDULER_SECRETS: tuple[tuple[str, str], ...] = (
    ("database", "*"),  # sql_alchemy_conn, sql_alchemy_conn_async, sql_alchemy_engine_args ...
    ("core", "fernet_key"),
    ("api", "secret_key"),
    ("api_auth", "jwt_secret"),
    ("api_auth", "jwt_private_key_path"),
    ("celery", "*"),  # broker_url, result_backend, flower_basic_auth ...
    ("celery_broker_transport_options", "*"),
)
VARIANTS = ("", "_CMD", "_SECRET")


def is_scheduler_secret(name: str) -> bool:
    """True for an environment variable that Airflow would read as one of :data:`SCHEDULER_SECRETS`."""
    upper = name.upper()
    if not upper.startswith(ENV_PREFIX):
        return False
    return any(fnmatch.fnmatchcase(upper, pattern) for pattern in _name_patterns())


def job_environment(environment: Mapping[str, str]) -> dict[str, str]:
    """``environment`` without the scheduler's secrets (:func:`is_scheduler_secret`)."""
    return {name: value for name, value in environment.items() if not is_scheduler_secret(name)}


@functools.cache
def _name_patterns() -> tuple[str, ...]:
    """Every environment name (as a pattern) under which Airflow reads a scheduler secret."""
    spellings: set[tuple[str, str]] = set()
    deprecated_options, deprecated_sections = _deprecations()
    for section, option in SCHEDULER_SECRETS:
        spellings.add((section, option))
        for (new_section, new_option), (old_section, old_option) in deprecated_options.items():
            if fnmatch.fnmatchcase(new_section, section) and fnmatch.fnmatchcase(new_option, option):
                spellings.add((old_section, old_option))
        if section in deprecated_sections:
            spellings.add((deprecated_sections[section], option))
    patterns: list[str] = []
    for section, option in sorted(spellings):
        tail = f"{section.replace('.', '_').upper()}__{option.upper()}"
        for variant in VARIANTS:
            patterns.append(f"{ENV_PREFIX}{tail}{variant}")
            patterns.append(f"{ENV_PREFIX}?*___{tail}{variant}")  # AIRFLOW__<TEAM>___<SECTION>__<KEY>
    return tuple(patterns)


def _deprecations() -> tuple[dict[tuple[str, str], tuple[str, str]], dict[str, str]]:
    """Airflow's own maps: (new section, option) -> (old section, option), and new section -> old section."""
    from airflow.configuration import conf

    options = {new: (old[0], old[1]) for new, old in conf.deprecated_options.items()}
    sections = {new: old[0] for new, old in conf.deprecated_sections.items()}
    return options, sections
