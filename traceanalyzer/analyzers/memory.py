"""Placeholder until the memory analyzer lands."""
