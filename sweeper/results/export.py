"""Exports of the leaderboard (CSV, JSON, Parquet), rebuilt from storage: one row per trial, every
column with one type, provenance on every row. `write_export` is the only function here that
writes."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pandas as pd

from sweeper.levels import is_level_column
from sweeper.errors import UserError, import_optional
from sweeper.study.provenance import PROVENANCE_COLUMNS, build_provenance
from sweeper.results.ranking import ranked_frame

EXPORT_FORMATS = ("csv", "json", "parquet")


def _is_missing(value) -> bool:
    if value is None or value is pd.NA:
        return True
    return (isinstance(value, str) and value == "") or (isinstance(value, float) and math.isnan(value))


# Columns whose type does not depend on the data; parameters' types follow their values.
_FIXED_DTYPES = {"rank": "Int64", "trial": "Int64", "duplicate_of": "Int64", "retry_of": "Int64",
                 "feasible": "boolean", "objective": "float64",
                 "rank_value": "float64", "duration_s": "float64",
                 "objective_2": "float64", "on_front": "boolean",  # these two: the Pareto mode
                 "ci_low": "float64", "ci_high": "float64", "precision_reached": "boolean",
                 "tied_with_best": "boolean", "validated": "boolean",
                 # a capacity study (max_load_within_slo): what each trial's search found
                 "capacity": "float64", "capacity_capped": "boolean", "capacity_first_failing": "float64"}
_STRING_COLUMNS = {"state", "failure_stage", "failure_kind", "seed", "host", "ci_source", "tie_rule",
                   *PROVENANCE_COLUMNS}


def column_dtype(name: str, values) -> str:
    """One dtype per column: boolean, Int64, float64 or string (missing values stay missing)."""
    if name in _FIXED_DTYPES:
        return _FIXED_DTYPES[name]
    if name in _STRING_COLUMNS:
        return "string"
    if name == "rank_level":  # a concurrency, or a request rate (open-loop levels)
        return "float64" if any(isinstance(v, float) for v in values) else "Int64"
    if (name.startswith("c") or is_level_column(name)) and name.endswith("_valid"):
        return "boolean"
    if (name.startswith("c") or is_level_column(name)) and not name.startswith("param_"):
        return "float64"
    present = [v for v in values if not _is_missing(v)]
    if present and all(isinstance(v, bool) for v in present):
        return "boolean"
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return "Int64"
    if present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return "float64"
    return "string"


def typed_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Empty strings become missing values and every column gets one type, so the three formats
    hold the same content."""
    columns = {}
    for name in frame.columns:
        values = [None if _is_missing(v) else (v.item() if hasattr(v, "item") else v)
                  for v in frame[name].tolist()]
        dtype = column_dtype(name, values)
        if dtype == "string":
            values = [None if v is None else str(v) for v in values]
        columns[name] = pd.array(values, dtype=dtype)
    return pd.DataFrame(columns, index=range(len(frame)))


def build_export_frame(study: optuna.Study, level: int | float | str | None = None, feasible_only: bool = False,
                       top: int | None = None) -> pd.DataFrame:
    frame = ranked_frame(study, level, feasible_only)
    if top is not None:
        frame = frame.head(top)
    provenance = build_provenance(study)
    frame = frame.assign(**{name: provenance[name] for name in PROVENANCE_COLUMNS})
    order = ["rank"] + [c for c in frame.columns if c != "rank"]
    return typed_frame(frame[order])


def export_dtypes(frame: pd.DataFrame) -> dict[str, str]:
    """The dtype of each column, to read a CSV or JSON export back with the same types."""
    return {name: str(dtype) for name, dtype in frame.dtypes.items()}


def write_export(frame: pd.DataFrame, path: Path, fmt: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "csv":
        frame.to_csv(path, index=False)
    elif fmt == "json":
        frame.to_json(path, orient="records", indent=1)
    elif fmt == "parquet":
        import_optional("pyarrow", "parquet", "a Parquet export")
        frame.to_parquet(path, index=False)
    else:
        raise UserError(f"unknown export format {fmt!r}")
    return path
