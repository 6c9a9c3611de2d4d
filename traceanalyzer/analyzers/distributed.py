"""Placeholder until the distributed analyzer lands."""
