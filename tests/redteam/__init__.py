"""Issue 26's red-team cases: what an attacker or a careless user tried, one test each,
marked redteam(area, case, before) (checked in tests/conftest.py; benchmarks/redteam.py
prints the table)."""
