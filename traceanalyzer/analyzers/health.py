"""Placeholder until the health analyzer lands."""
