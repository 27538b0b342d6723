"""Load generator: seeded prompts (workload), streaming client (client), statistics (metrics)."""
