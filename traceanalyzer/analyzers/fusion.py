"""Placeholder until the fusion analyzer lands."""
