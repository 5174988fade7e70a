"""Tests of the runners and the scheduler (issue 4)."""
