"""
kafkatw's tests (pytest and trial both import this package first).

Hypothesis runs derandomized and without a per-example deadline by default, so
that a unit test gives the same verdict on every run and a garbage-collection
pause or a busy CI machine cannot fail it.  C{HYPOTHESIS_PROFILE=explore}
searches with fresh random examples instead (more of them), for local runs.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("kafkatw", derandomize=True, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("explore", deadline=None, max_examples=1000,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "kafkatw"))
