"""Workflows: the multi-step procedures built on studies, results and profiles (above them; under the CLI).

- ablation.py   one lever at a time from a baseline, and finalist re-validation (pure)
- campaign_phases.py `sweeper campaign`: sweep, validate the finalists, profile the winner, report, script
- doctor_checks.py `sweeper doctor`: every check a sweep of a space on a host needs, without a launch
- validation.py the finalists re-measured on fresh servers until the winner separates (or a tie)
"""
