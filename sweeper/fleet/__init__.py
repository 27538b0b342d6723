"""Many hosts, one study (PostgreSQL): a worker per host or GPU set, leases so one server runs per slot.

- workers.py  spawn and drive one worker process per host slot; the shared objective
- leases.py   host leases and the study lock in the study's own database
"""
