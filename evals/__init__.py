"""Metrics and benchmark runners."""
