"""What a study found, rebuilt from storage alone (no GPU, no re-run): the last stage of the pipeline.

- leaderboard.py      one row per trial (pandas), best feasible first; the per-level columns
- table.py            the leaderboard as a rich table
- ranking.py          ranking at any concurrency level, each value's 95% CI and its tie with #1
- answer.py           the one answer: the best config, its interval, the tie or not, the noise floor
- export.py           CSV / JSON / Parquet exports with provenance columns (study/provenance.py)
- show.py             `sweeper show`: trials by state, the best so far, what is running
- importance.py       parameter importance over the feasible trials
- gap.py              the gap from the best config to the space's target, in step time
- ablation_table.py   ablation and finalist summaries as tables
- campaign_summary.py a campaign's morning summary: phases, the winner, the answer
- script.py           the winner as a ready-to-run launch script
- report.py           `sweeper report`: HTML + Markdown
- report_data.py      the report's data, gathered from the study
- report_sections.py  the report's neutral sections
- report_render.py    the sections as HTML
- figures.py          the report's matplotlib plots
"""
