"""What a study found, rebuilt from storage alone (no GPU, no re-run): the last stage of the pipeline.

- leaderboard.py      one row per trial (pandas), best feasible first; the per-level columns
- table.py            the leaderboard as a rich table
- ranking.py          ranking at any concurrency level, each value's 95% CI and its tie with #1
- export.py           CSV / JSON / Parquet exports with provenance columns
- provenance.py       where numbers came from: versions, engine, model, GPU
- show.py             `sweeper show`: trials by state, the best so far, what is running
- importance.py       parameter importance over the feasible trials
- gap.py              the gap from the best config to the space's target, in step time
- ablation_table.py   ablation and finalist summaries as tables
- script.py           the winner as a ready-to-run launch script
- report.py           `sweeper report`: HTML + Markdown; built from
  report_data.py      (gathered from the study), report_sections.py (neutral sections),
  report_render.py    (HTML) and figures.py (matplotlib plots)
"""
