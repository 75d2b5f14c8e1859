"""The runtime quantile a plan is made from, as the user chooses it: ``p50``, ``p90``, a number in [0.5, 1), or
``auto`` (p90 when the plan has a deadline, p50 otherwise).

Apart from :mod:`agora_optimizer.predict.runtime_quantiles`, which computes the quantiles, so that a command
that only reads the choice (``agora optimize`` of a WfFormat file) does not load scikit-learn and pandas.
"""

from __future__ import annotations

import math
import re

from agora_optimizer.errors import AgoraError

AUTO = "auto"
DEADLINE_QUANTILE = 0.9  # auto, with a deadline
DEFAULT_QUANTILE = 0.5  # auto, without one
_LABEL = re.compile(r"p(\d{1,2}(?:\.\d+)?)")


def parse_quantile(text: str, field: str = "--runtime-quantile") -> str | float:
    """``auto``, or a quantile in [0.5, 1) from ``p90``, ``0.9`` or ``90``; else an error naming ``field``."""
    value = text.strip().lower()
    if value == AUTO:
        return AUTO
    match = _LABEL.fullmatch(value)
    try:
        number = float(match.group(1)) / 100 if match else float(value)
    except ValueError:
        number = math.nan
    if not match and number >= 1.0:
        number /= 100  # "90" as a percentile
    if not 0.5 <= number < 1.0:
        raise AgoraError(f"{field}: expected p50, p90, auto or a quantile in [0.5, 1), got {text!r}")
    return number


def resolve_quantile(choice: str | float, has_deadline: bool) -> float:
    """The quantile a plan is made from: ``choice``, or for ``auto`` p90 with a deadline and p50 without."""
    if choice == AUTO:
        return DEADLINE_QUANTILE if has_deadline else DEFAULT_QUANTILE
    return float(choice)


def quantile_label(quantile: float) -> str:
    """``0.9`` -> ``p90``, ``0.975`` -> ``p97.5``."""
    return f"p{round(100 * quantile, 4):g}"


def quantile_reason(choice: str | float, has_deadline: bool) -> str:
    """Why a plan's runtimes are at the quantile they are, for its reader."""
    quantile = quantile_label(resolve_quantile(choice, has_deadline))
    if choice != AUTO:
        return f"{quantile}, as asked"
    return f"{quantile}, auto: {'a deadline is set' if has_deadline else 'no deadline'}"
